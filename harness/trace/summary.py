"""Trace summaries: one trace file, or every rank's trace of a job (result.json `profile`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.trace.classify import TraceKind, classify, detect_kind
from harness.trace.overlap import (
    Busy,
    busy_intervals,
    exposed_gaps,
    step_table,
    step_windows,
    unit_table,
)
from harness.trace.parse import Trace, TraceError, load_trace

TRACES_DIR = "traces"
_RANK_FILE = re.compile(r"^rank(\d+)\.json(\.gz)?$")


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


def analyse(trace: Trace) -> Analysis:
    events = trace.events
    kind = detect_kind(events)
    labels = classify(events, kind)
    busy = busy_intervals(events, labels)
    windows = step_windows(events, kind)
    if windows.empty:
        raise TraceError(f"{trace.path}: no ProfilerStep#N annotation to split the trace by")
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


def summarize_trace(path: Path | str) -> dict[str, Any]:
    """{path, rank, kind, steps: [per-step rows], units: [...], summary: {...}}."""
    a = analyse(load_trace(path))
    return {
        "path": str(a.trace.path),
        "rank": a.rank,
        "kind": a.kind,
        "steps": _records(a.steps),
        "units": _records(a.units),
        "summary": aggregate(a.steps),
    }


def find_traces(job_dir: Path | str) -> list[Path]:
    """The job's per-rank trace files, ordered by rank."""
    d = Path(job_dir) / TRACES_DIR
    found = [(int(m.group(1)), p) for p in d.glob("rank*.json*") if (m := _RANK_FILE.match(p.name))]
    return [p for _, p in sorted(found)]


def summarize_job(job_dir: Path | str) -> dict[str, Any]:
    """The result.json `profile` field for a job directory holding traces/rank<r>.json.gz.

    steps: one row per (rank, step); summary: over all ranks and steps (overlap % is total
    overlap over total communication, the others per-step means); per_rank: each rank's.
    Raises TraceError when the job has no traces or one cannot be read.
    """
    job_dir = Path(job_dir)
    paths = find_traces(job_dir)
    if not paths:
        raise TraceError(f"{job_dir / TRACES_DIR}: no rank<r>.json[.gz] trace files")
    tables, per_rank, units, kinds = [], {}, [], set()
    for p in paths:
        a = analyse(load_trace(p))
        kinds.add(a.kind)
        tables.append(a.steps.assign(rank=a.rank))
        units.append(a.units.assign(rank=a.rank))
        per_rank[str(a.rank)] = aggregate(a.steps)
    steps = pd.concat(tables, ignore_index=True)
    steps = steps[["rank", *[c for c in steps.columns if c != "rank"]]]
    return {
        "traces": [str(p.relative_to(job_dir)) for p in paths],
        "kind": kinds.pop() if len(kinds) == 1 else sorted(kinds),
        "steps": _records(steps),
        "units": _records(pd.concat(units, ignore_index=True)),
        "summary": aggregate(steps),
        "per_rank": per_rank,
    }
