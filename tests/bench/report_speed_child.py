"""Render a report in a fresh process; print its wall time, peak memory and trace parses.

python tests/bench/report_speed_child.py <sweep dir> <out dir>

Peak memory: this process's resident-set peak (the kernel's high-water mark), and the
peak of the whole process tree (this process, the pool's forkserver and its workers, which
summarise and attribute the traces), sampled every 20 ms with psutil. Parses counted here
are this process's own; a warm report must make none, and start no worker.
"""

import json
import sys
import threading
import time
from pathlib import Path

import psutil

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
    tree = {"peak": 0, "workers": 0}
    done = threading.Event()

    def sample() -> None:
        me = psutil.Process()
        while not done.wait(0.02):
            try:
                kids = me.children(recursive=True)
                total = me.memory_info().rss + sum(k.memory_info().rss for k in kids)
            except psutil.Error:
                continue
            tree["peak"] = max(tree["peak"], total)
            tree["workers"] = max(tree["workers"], len(kids))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    baseline = peak_rss_bytes()
    t0 = time.perf_counter()
    build_report([Path(sys.argv[1])], Path(sys.argv[2]))
    seconds = time.perf_counter() - t0
    done.set()
    sampler.join()
    print(json.dumps({"seconds": seconds, "peak_rss_bytes": peak_rss_bytes(),
                      "baseline_rss_bytes": baseline, "tree_peak_rss_bytes": tree["peak"],
                      "child_processes": tree["workers"], "parsed_here": len(parsed)}))  # fmt: skip
