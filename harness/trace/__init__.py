"""Profiler trace analysis (no torch): parse -> classify -> overlap -> summary / timeline.

Entry points: `summarize_trace(path)`, `summarize_job(job_dir)` (the result.json `profile`
field), `plot_timeline(job_dirs, out)`, and the CLI `python -m harness.trace`.
"""

from harness.trace.parse import Trace, TraceError, load_trace
from harness.trace.summary import analyse, find_traces, summarize_job, summarize_trace

__all__ = [
    "Trace",
    "TraceError",
    "analyse",
    "find_traces",
    "load_trace",
    "summarize_job",
    "summarize_trace",
]
