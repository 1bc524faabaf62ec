"""Render a report in a fresh process; print its wall time, peak memory and trace parses.

python tests/bench/report_speed_child.py <sweep dir> <out dir>

Peak memory is this process's resident-set peak and the largest of its pool workers'
(`RUSAGE_CHILDREN`, the workers that summarised and attributed the traces). Parses counted
here are this process's own; a warm report must make none (nor start workers).
"""

import json
import resource
import sys
import time
from pathlib import Path

from harness.rank.host_usage import peak_rss_bytes
from harness.report.render import build_report
from harness.trace import parse

if __name__ == "__main__":
    parsed = []
    real = parse._read

    def counted(path):  # type: ignore[no-untyped-def]
        parsed.append(str(path))
        return real(path)

    parse._read = counted  # type: ignore[assignment]
    baseline = peak_rss_bytes()
    t0 = time.perf_counter()
    build_report([Path(sys.argv[1])], Path(sys.argv[2]))
    seconds = time.perf_counter() - t0
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(json.dumps({"seconds": seconds, "peak_rss_bytes": peak_rss_bytes(),
                      "baseline_rss_bytes": baseline, "worker_peak_rss_bytes": workers,
                      "parsed_here": len(parsed)}))  # fmt: skip
