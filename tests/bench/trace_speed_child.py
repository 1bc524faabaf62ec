"""Summarize one trace in a fresh process; print wall time and peak RSS as JSON.

python tests/bench/trace_speed_child.py <trace>
"""

import json
import sys
import time

from harness.rank.host_usage import peak_rss_bytes
from harness.trace import summarize_trace

if __name__ == "__main__":
    baseline = peak_rss_bytes()  # interpreter + numpy + pandas, before any parsing
    t0, c0 = time.perf_counter(), time.process_time()
    summary = summarize_trace(sys.argv[1])
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cpu_seconds": cpu_seconds,  # steadier than wall time on a shared machine
                "peak_rss_bytes": peak_rss_bytes(),
                "baseline_rss_bytes": baseline,
                "steps": len(summary["steps"]),
                "overlap_pct": summary["summary"]["overlap_pct"],
            }
        )
    )
