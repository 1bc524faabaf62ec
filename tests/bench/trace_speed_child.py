"""Summarize one trace in a fresh process; print wall time and peak RSS as JSON.

python tests/bench/trace_speed_child.py <trace>
"""

import json
import re
import resource
import sys
import time
from pathlib import Path

from harness.trace import summarize_trace


def _rss_bytes() -> int:
    """This process's peak RSS. VmHWM belongs to the address space that exec created;
    ru_maxrss survives exec on Linux, so it would report the parent's (pytest's) peak."""
    status = Path("/proc/self/status")
    if status.exists():
        return int(re.search(r"^VmHWM:\s+(\d+) kB", status.read_text(), re.M).group(1)) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # macOS: bytes


if __name__ == "__main__":
    baseline = _rss_bytes()  # interpreter + numpy + pandas, before any parsing
    t0, c0 = time.perf_counter(), time.process_time()
    summary = summarize_trace(sys.argv[1])
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cpu_seconds": cpu_seconds,  # steadier than wall time on a shared machine
                "peak_rss_bytes": _rss_bytes(),
                "baseline_rss_bytes": baseline,
                "steps": len(summary["steps"]),
                "overlap_pct": summary["summary"]["overlap_pct"],
            }
        )
    )
