"""Attribute or summarize one trace in a fresh process; print its wall and CPU time as JSON.

python tests/bench/attribute_speed_child.py <attribute|summarize> <trace>
"""

import json
import sys
import time

from harness.trace import summarize_trace
from harness.trace.jobs import attribute_trace

if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    t0, c0 = time.perf_counter(), time.process_time()
    if mode == "attribute":
        steps = len(attribute_trace(path))
    else:
        steps = len(summarize_trace(path)["steps"])
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "steps": steps}))
