"""Trace summaries computed offline, cached beside a job's traces, for a whole sweep at once.

Jobs only write traces; whoever reads a sweep (`harness.results`, and so the report)
summarises them here. A summary is cached as `<job dir>/trace_cache/<trace>.summary.json`,
outside `traces/` (which then holds traces alone, as HolisticTraceAnalysis expects of a
trace folder), or beside a trace that is not in a job's `traces/`. It is valid while the
trace's size and mtime and the analysis version are unchanged, so a fix to the analysis (a
bump of ANALYSIS_VERSION) reaches old sweeps. Jobs are summarised in a process pool.

A job's other records computed from all its traces at once (the diagnosis's attribution,
`harness.trace.diagnose.traced`) are cached as `<job dir>/trace_cache/<name>.json` under the
same key, every trace's size and mtime and the analysis version (`job_key`), and computed in
the same pool, from the same parse as the summaries: the caller hands the pool a `JobRecord`,
so this library never imports the diagnosis.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
import traceback
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from harness.jobdir.paths import JobDir
from harness.jobdir.result import shared_file_mode
from harness.trace.parse import TraceError, load_trace
from harness.trace.rank_files import every_rank_once, one_file_per_rank
from harness.trace.summary import (
    Analysis,
    analyse,
    find_traces,
    summarize_analysis,
    summarize_job,
    summarize_trace,
)

# Bump whenever a change to parsing, classification or overlap alters any summary (5: a
# yafsdp unit is its range's name as written, 'unit3' or 'layers.3', not '3').
ANALYSIS_VERSION = 5


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


def _write_cache(trace: Path, key: dict[str, Any], value: dict[str, Any]) -> None:
    _write_json(cache_path(trace), key, value)


def _write_json(target: Path, key: dict[str, Any], value: dict[str, Any]) -> None:
    try:
        target.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        os.fchmod(fd, shared_file_mode())  # mkstemp makes 0600; a sweep is shared
        with os.fdopen(fd, "w") as f:
            json.dump({"key": key, "value": value}, f)
        os.replace(tmp, target)
    except OSError:
        pass  # a read-only sweep is summarised every time, which is still correct


def job_record_path(job_dir: Path, name: str) -> Path:
    return Path(job_dir) / CACHE_DIR / f"{name}.json"


def job_key(job_dir: Path, **extra: Any) -> dict[str, Any]:
    """The key of a record of the whole job: every trace's size and mtime, the analysis
    version, and what else the record depends on (`extra`, JSON-ready)."""
    traces = {}
    for trace in find_traces(job_dir):
        st = trace.stat()
        traces[trace.name] = [st.st_size, st.st_mtime_ns]
    return {"analysis_version": ANALYSIS_VERSION, "traces": traces, **extra}


def read_job_record(job_dir: Path, name: str, key: dict[str, Any]) -> dict[str, Any] | None:
    """The job's cached record `name`, where its key is `key`; else None."""
    try:
        cached = json.loads(job_record_path(job_dir, name).read_text())
        if cached.get("key") == json.loads(json.dumps(key)):
            return cached["value"]
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        pass
    return None


def write_job_record(job_dir: Path, name: str, key: dict[str, Any], value: dict[str, Any]) -> None:
    _write_json(job_record_path(job_dir, name), key, value)


class JobRecord(Protocol):
    """A record of a whole job computed from its analysed traces, cached beside its
    summaries; the pool computes it from the parse that serves the summaries."""

    def key(self, job_dir: Path) -> dict[str, Any]: ...

    def cached(self, job_dir: Path, key: dict[str, Any]) -> bool: ...

    def compute(
        self, job_dir: Path, key: dict[str, Any], analyses: list[Analysis], error: str | None
    ) -> None: ...


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


def is_cached(job_dir: Path, record: JobRecord | None = None) -> bool:
    if record is not None and not record.cached(job_dir, record.key(job_dir)):
        return False
    return all(_read_cache(p) is not None for p in find_traces(job_dir))


def _parse_once(job_dir: Path, record: JobRecord) -> None:
    """Parse each of the job's traces once: cache its summary, and the job's `record`."""
    record_key = record.key(job_dir)
    analyses, errors = [], []
    paths = find_traces(job_dir)
    try:  # the diagnosis's rule, before any trace: one file per rank
        one_file_per_rank(paths)
    except TraceError as e:
        errors.append(str(e))
    for trace in paths:
        key = _key(trace)
        try:
            found = analyse(load_trace(trace))
            analyses.append(found)
            value = summarize_analysis(found)
        except TraceError as e:
            errors.append(str(e))
            value = {"error": str(e)}
        _write_cache(trace, key, value)
    if not errors:  # and each file the rank its name says
        try:
            every_rank_once(job_dir, paths, [_rank_record(a) for a in analyses], all_ranks=False)
        except TraceError as e:
            errors.append(str(e))
    record.compute(job_dir, record_key, analyses, errors[0] if errors else None)


def _rank_record(a: Analysis) -> dict[str, Any]:
    """The rank and world size a trace records, as rank_files checks them."""
    world = (a.trace.metadata.get("distributedInfo") or {}).get("world_size")
    return {"rank": a.rank, "world_size": world if isinstance(world, int) else None}


def _job_work(job_dir: Path, record: JobRecord | None = None) -> dict[str, Any]:
    """job_profile, after computing `record` (and the summaries) where stale."""
    if record is not None and find_traces(job_dir) and not is_cached(job_dir, record):
        try:
            _parse_once(Path(job_dir), record)
        except (OSError, ValueError) as e:
            return {"error": f"trace analysis failed: {e}"}
        except Exception as e:  # noqa: BLE001 - a flaw of the analysis: this job's error
            where = traceback.extract_tb(e.__traceback__)[-1]
            return {
                "error": f"{JobDir(job_dir).traces}: the trace analysis failed: "
                f"{type(e).__name__}: {' '.join(str(e).split())} "
                f"(at {Path(where.filename).name}:{where.lineno})"
            }
    return job_profile(job_dir)


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


def job_profiles(
    job_dirs: list[Path], *, workers: int | None = None, record: JobRecord | None = None
) -> dict[Path, dict]:
    """job_profile of every job; jobs with an uncached trace (or `record`) are summarised
    in a process pool of `workers` (default: the machine's cores), `record` computed and
    cached from the same parse."""
    stale = [d for d in job_dirs if not is_cached(d, record)]
    out = {d: job_profile(d) for d in job_dirs if d not in set(stale)}
    workers = min(workers or os.cpu_count() or 1, len(stale))
    work = partial(_job_work, record=record)
    if workers <= 1:
        out.update({d: work(d) for d in stale})
    else:
        # forkserver: the caller may hold threads (Hydra's callback), which fork must not copy
        ctx = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            out.update(zip(stale, pool.map(work, stale), strict=True))
    return {d: out[d] for d in job_dirs}
