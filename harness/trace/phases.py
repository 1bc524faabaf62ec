"""What a timeline lane shows, in words: the step's phases (forward, backward, optimizer)
and the threads by role rather than by OS thread id.

Phases come from ranges torch records for every engine: backward spans the autograd
engine's `autograd::engine::evaluate_function` events of the step, the optimizer its
`Optimizer.step#`/`Optimizer.zero_grad#` ranges, and forward the time from the step's start
to the first backward event. No torch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.trace.lanes import main_thread, where
from harness.trace.overlap import Intervals, clip, merge

FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"
_BACKWARD = "autograd::engine::evaluate_function"
_OPTIMIZER = r"^Optimizer\.(step|zero_grad)#"


def step_phases(events: pd.DataFrame, lo: float, hi: float) -> dict[str, Intervals]:
    """Forward, backward and optimizer time within the window [lo, hi] (microseconds)."""
    ts = events["ts"].to_numpy(dtype=float)
    end = ts + events["dur"].to_numpy(dtype=float)
    inside = (ts < hi) & (end > lo)
    backward = inside & where(events["name"], lambda s: s.str.startswith(_BACKWARD))
    optimizer = inside & where(events["name"], lambda s: s.str.match(_OPTIMIZER))
    out: dict[str, Intervals] = {}
    if backward.any():
        first, last = float(ts[backward].min()), float(end[backward].max())
        out[FORWARD] = clip(merge(np.array([lo]), np.array([first])), lo, hi)
        out[BACKWARD] = clip(merge(np.array([first]), np.array([last])), lo, hi)
    if optimizer.any():
        out[OPTIMIZER] = clip(merge(ts[optimizer], end[optimizer]), lo, hi)
    return {k: v for k, v in out.items() if v.start.size}


def thread_titles(events: pd.DataFrame, names: dict[tuple[str, str], str]) -> dict[str, str]:
    """tid -> `training thread`, `gloo thread 1`, ... (the OS id says nothing to a reader)."""
    main = main_thread(events)
    titles: dict[str, str] = {}
    counts: dict[str, int] = {}
    pairs = events[["pid", "tid"]].drop_duplicates().astype(str).itertuples(index=False)
    for pid, tid in sorted((str(p), str(t)) for p, t in pairs):
        if main is not None and (pid, tid) == main:
            titles[tid] = "training thread"
            continue
        name = names.get((pid, tid), "")
        role = "gloo thread" if "gloo" in name else "thread"
        counts[role] = counts.get(role, 0) + 1
        titles.setdefault(tid, f"{role} {counts[role]}")
    return titles
