"""Profiler trace analysis (no torch), in two rooms.

The library (this package): parse -> classify -> overlap -> summary, the per-job cache of
summaries (`cache`), and the timeline pictures (`timeline`). Entry points:
`summarize_trace(path)`, `summarize_job(job_dir)` (the result.json `profile` field),
`plot_timeline(job_dirs, out)`.

The diagnosis (`harness.trace.diagnose`): each step's time split into causes, the cross-rank
skew, the critical path, and `why` one job's step differs from another's. It takes records
(parsed traces, a result, a job's traced record) and reads no job directory; the library
never imports it. `harness.trace.jobs` reads job directories for it: a job's traced record
(its attribution) is cached beside its summaries and computed in the same pool
(`cache.job_profiles(..., record=jobs.RECORD)`), so `why` of two jobs reads two records.

One command line for both: `python -m harness.trace <summarize|timeline|attribute|why|path>`.
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
