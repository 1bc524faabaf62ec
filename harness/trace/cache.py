"""Trace summaries computed offline, cached beside a job's traces, for a whole sweep at once.

Jobs only write traces; whoever reads a sweep (`harness.results`, and so the report)
summarises them here. A summary is cached as `<job dir>/trace_cache/<trace>.summary.json`,
outside `traces/` (which then holds traces alone, as HolisticTraceAnalysis expects of a
trace folder), or beside a trace that is not in a job's `traces/`. It is valid while the
trace's size and mtime and the analysis version are unchanged, so a fix to the analysis (a
bump of ANALYSIS_VERSION) reaches old sweeps. Jobs are summarised in a process pool.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from harness.jobdir.paths import JobDir
from harness.jobdir.result import shared_file_mode
from harness.trace.parse import TraceError
from harness.trace.summary import find_traces, summarize_job, summarize_trace

# Bump whenever a change to parsing, classification or overlap alters any summary.
ANALYSIS_VERSION = 4


CACHE_DIR = "trace_cache"  # a job's summaries, beside its traces/ folder


def cache_path(trace: Path) -> Path:
    if trace.parent.name == "traces":
        return trace.parent.parent / CACHE_DIR / f"{trace.name}.summary.json"
    return trace.with_name(f".{trace.name}.summary.json")


def _key(trace: Path) -> dict[str, int]:
    st = trace.stat()
    return {"analysis_version": ANALYSIS_VERSION, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _read_cache(trace: Path) -> dict[str, Any] | None:
    try:
        cached = json.loads(cache_path(trace).read_text())
        value = cached["value"]
        if cached.get("key") == _key(trace) and _is_summary(value):
            return value  # anything else in the entry is redone, never trusted
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        pass
    return None


# what summarize_trace returns, that summarize_job reads (or a cached failure's one line)
_SUMMARY_KEYS = frozenset({"rank", "kind", "steps", "units", "summary"})


def _is_summary(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    return isinstance(value.get("error"), str) or _SUMMARY_KEYS <= set(value)


def _write_cache(trace: Path, key: dict[str, int], value: dict[str, Any]) -> None:
    try:
        target = cache_path(trace)
        target.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{trace.name}.", suffix=".tmp")
        os.fchmod(fd, shared_file_mode())  # mkstemp makes 0600; a sweep is shared
        with os.fdopen(fd, "w") as f:
            json.dump({"key": key, "value": value}, f)
        os.replace(tmp, target)
    except OSError:
        pass  # a read-only sweep is summarised every time, which is still correct


def cached_trace_summary(trace: Path) -> dict[str, Any]:
    """summarize_trace(trace), from the cache when it is valid; a trace that cannot be
    analysed raises TraceError (the failure is cached too)."""
    trace = Path(trace)
    value = _read_cache(trace)
    if value is None:
        key = _key(trace)  # taken before reading, so a trace rewritten meanwhile is redone
        try:
            value = summarize_trace(trace)
        except TraceError as e:
            value = {"error": str(e)}
        except Exception as e:  # noqa: BLE001 - a flaw of the analysis on this trace: said
            # as this job's profile error (not cached, so a fix reaches it at once), so that
            # one trace never takes down the sweep's table and report
            where = traceback.extract_tb(e.__traceback__)[-1]
            raise TraceError(
                f"{trace}: the trace analysis failed: {type(e).__name__}: "
                f"{' '.join(str(e).split())} (at {Path(where.filename).name}:{where.lineno})"
            ) from e
        _write_cache(trace, key, value)
    if "error" in value:
        raise TraceError(value["error"])
    return {**value, "path": str(trace)}


def is_cached(job_dir: Path) -> bool:
    return all(_read_cache(p) is not None for p in find_traces(job_dir))


def job_profile(job_dir: Path | str) -> dict[str, Any]:
    """The job's trace summary (see summarize_job), or {"error": one line} when its traces
    are missing or cannot be analysed."""
    try:
        return summarize_job(job_dir, summarize=cached_trace_summary)
    except TraceError as e:
        return {"error": str(e)}
    except (OSError, ValueError) as e:
        return {"error": f"trace analysis failed: {e}"}
    except Exception as e:  # noqa: BLE001 - combining the ranks failed: this job's error
        where = traceback.extract_tb(e.__traceback__)[-1]
        return {
            "error": f"{JobDir(job_dir).traces}: combining the ranks' summaries failed: "
            f"{type(e).__name__}: {' '.join(str(e).split())} "
            f"(at {Path(where.filename).name}:{where.lineno})"
        }


def job_profiles(job_dirs: list[Path], *, workers: int | None = None) -> dict[Path, dict]:
    """job_profile of every job; jobs with an uncached trace are summarised in a process
    pool of `workers` (default: the machine's cores)."""
    stale = [d for d in job_dirs if not is_cached(d)]
    out = {d: job_profile(d) for d in job_dirs if d not in set(stale)}
    workers = min(workers or os.cpu_count() or 1, len(stale))
    if workers <= 1:
        out.update({d: job_profile(d) for d in stale})
    else:
        # forkserver: the caller may hold threads (Hydra's callback), which fork must not copy
        ctx = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            out.update(zip(stale, pool.map(job_profile, stale), strict=True))
    return {d: out[d] for d in job_dirs}
