"""Trace summaries: one trace file, or every rank's trace of a job.

A summary names what it could not use: unknown event categories are ignored and counted,
and a trace without `distributedInfo` is summarised with its rank taken from its file name,
each with a one-line warning naming the file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.jobdir.paths import JobDir
from harness.trace.classify import TraceKind, classify, detect_kind
from harness.trace.lanes import no_steps_reason
from harness.trace.overlap import (
    STEP_COLUMNS,
    UNIT_COLUMNS,
    Busy,
    busy_intervals,
    exposed_gaps,
    step_table,
    step_windows,
    unit_table,
)
from harness.trace.parse import Trace, TraceError, load_trace
from harness.trace.rank_files import RANK_FILE, every_rank_once, one_file_per_rank

_RANK_FILE = RANK_FILE


@dataclass(frozen=True)
class Analysis:
    """Everything computed from one trace; each field is a plain table or interval set."""

    trace: Trace
    kind: TraceKind
    labels: np.ndarray
    busy: Busy
    windows: pd.DataFrame
    steps: pd.DataFrame
    units: pd.DataFrame
    gaps: pd.DataFrame

    @property
    def rank(self) -> int:
        r = self.trace.rank
        if r is not None:
            return r
        m = _RANK_FILE.match(self.trace.path.name)
        return int(m.group(1)) if m else 0


def _recorded_on_gpu(trace: Trace) -> bool:
    info = trace.metadata.get("distributedInfo") or {}
    return info.get("backend") == "nccl" or bool(trace.metadata.get("deviceProperties"))


def analyse(trace: Trace) -> Analysis:
    """Raise TraceError, in one line naming the file, when the trace cannot be split into
    steps or a GPU run's trace holds only CPU events."""
    events = trace.events
    kind = detect_kind(events)
    if kind == "cpu" and _recorded_on_gpu(trace):
        raise TraceError(
            f"{trace.path}: only CPU events, though recorded on GPUs (no kernel, memcpy or "
            "memset); profile with ProfilerActivity.CUDA"
        )
    labels = classify(events, kind)
    busy = busy_intervals(events, labels)
    windows = step_windows(events, kind)
    if windows.empty:
        raise TraceError(no_steps_reason(trace.path, trace.events))
    return Analysis(
        trace=trace,
        kind=kind,
        labels=labels,
        busy=busy,
        windows=windows,
        steps=step_table(busy, windows),
        units=unit_table(events, busy),
        gaps=exposed_gaps(busy, windows),
    )


def aggregate(steps: pd.DataFrame) -> dict[str, float | None]:
    """Per-step means; overlap % is total overlap over total communication."""
    comm = float(steps["comm_s"].sum())
    pct = 100.0 * float(steps["overlap_s"].sum()) / comm if comm > 0 else None
    return {
        "overlap_pct": pct,
        "exposed_comm_s_per_step": float(steps["exposed_comm_s"].mean()),
        "comm_s_per_step": float(steps["comm_s"].mean()),
        "compute_s_per_step": float(steps["compute_s"].mean()),
        "idle_s_per_step": float(steps["idle_s"].mean()),
        "memcpy_s_per_step": float(steps["memcpy_s"].mean()),
        "window_s_per_step": float(steps["window_s"].mean()),
    }


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    # NaN (no communication in a step) becomes None so result.json stays valid JSON
    return [
        {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items()}
        for row in df.to_dict("records")
    ]


def trace_warnings(a: Analysis) -> list[str]:
    """One line per thing the summary had to do without, naming the file."""
    out = []
    if not a.trace.metadata.get("distributedInfo"):
        out.append(f"{a.trace.path}: no distributedInfo; rank {a.rank} taken from the file name")
    if a.trace.ignored:
        cats = ", ".join(f"{c or '(none)'} ({n})" for c, n in sorted(a.trace.ignored.items()))
        out.append(f"{a.trace.path}: ignored events of unknown categories: {cats}")
    return out


def summarize_trace(path: Path | str) -> dict[str, Any]:
    """{path, rank, kind, steps: [per-step rows], units: [...], summary: {...},
    ignored_events: {category: count}, warnings: [one line each]}."""
    return summarize_analysis(analyse(load_trace(path)))


def summarize_analysis(a: Analysis) -> dict[str, Any]:
    """summarize_trace of a trace already parsed and analysed."""
    summary = aggregate(a.steps)
    if a.trace.ignored:  # only then, so tables of ordinary traces keep their columns
        summary["ignored_events"] = sum(a.trace.ignored.values())
    world = (a.trace.metadata.get("distributedInfo") or {}).get("world_size")
    return {
        "path": str(a.trace.path),
        "rank": a.rank,
        "world_size": world if isinstance(world, int) else None,
        "kind": a.kind,
        "steps": _records(a.steps),
        "units": _records(a.units),
        "summary": summary,
        "ignored_events": dict(a.trace.ignored),
        "warnings": trace_warnings(a),
    }


def find_traces(job_dir: Path | str) -> list[Path]:
    """The job's per-rank trace files, ordered by rank."""
    d = JobDir(job_dir).traces
    found = [(int(m.group(1)), p) for p in d.glob("rank*.json*") if (m := _RANK_FILE.match(p.name))]
    return [p for _, p in sorted(found)]


def summarize_job(
    job_dir: Path | str, *, summarize: Callable[[Path], dict[str, Any]] = summarize_trace
) -> dict[str, Any]:
    """Every rank's trace of a job directory holding traces/rank<r>.json.gz, combined.

    steps: one row per (rank, step); summary: over all ranks and steps (overlap % is total
    overlap over total communication, the others per-step means); per_rank: each rank's.
    `summarize` gives one trace's summary (a cached one, say).
    Raises TraceError when the job has no traces or one cannot be read.
    """
    job_dir = Path(job_dir)
    paths = find_traces(job_dir)
    if not paths:
        raise TraceError(f"{JobDir(job_dir).traces}: no rank<r>.json[.gz] trace files")
    one_file_per_rank(paths)
    summaries = [summarize(p) for p in paths]
    every_rank_once(job_dir, paths, summaries)
    tables, per_rank, units, kinds, warnings, ignored = [], {}, [], set(), [], 0
    for t in summaries:
        kinds.add(t["kind"])
        steps = pd.DataFrame(t["steps"], columns=STEP_COLUMNS).astype({"overlap_pct": float})
        tables.append(steps.assign(rank=t["rank"]))
        units.append(pd.DataFrame(t["units"], columns=UNIT_COLUMNS).assign(rank=t["rank"]))
        per_rank[str(t["rank"])] = t["summary"]
        warnings += t.get("warnings", [])
        ignored += t["summary"].get("ignored_events", 0)
    steps = pd.concat(tables, ignore_index=True)
    steps = steps[["rank", *[c for c in steps.columns if c != "rank"]]]
    return {
        "traces": [str(p.relative_to(job_dir)) for p in paths],
        "kind": kinds.pop() if len(kinds) == 1 else sorted(kinds),
        "steps": _records(steps),
        "units": _records(pd.concat(units, ignore_index=True)),
        "summary": {**aggregate(steps), **({"ignored_events": ignored} if ignored else {})},
        "per_rank": per_rank,
        "warnings": warnings,
    }
