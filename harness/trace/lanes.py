"""Which lane (CPU thread or GPU stream) an event sits on, and which CPU thread trains.

Kineto draws GPU lanes as pid = device, tid = stream. Besides kernels and copies they hold
`gpu_user_annotation` events: device-side copies of CPU annotations, `ProfilerStep#N`
included. Those must never be mistaken for CPU events (step marks, the training thread).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")  # device busy time, with a stream
GPU_LANE_CATEGORIES = (*GPU_CATEGORIES, "gpu_user_annotation")
STEP_PATTERN = r"ProfilerStep\s*#\s*(\d+)"


def where(column: pd.Series, predicate: Callable[[pd.Series], pd.Series]) -> np.ndarray:
    """Evaluate a test on a string column once per distinct value (not once per event)."""
    col = column if isinstance(column.dtype, pd.CategoricalDtype) else column.astype("category")
    values = pd.Series(col.cat.categories.astype(str))
    hit = np.asarray(predicate(values), dtype=bool)
    codes = col.cat.codes.to_numpy()
    return np.where(codes >= 0, hit[np.clip(codes, 0, None)], False)


def on_cpu(events: pd.DataFrame) -> np.ndarray:
    """Events on CPU threads: not on a GPU lane, whether by category or by process id."""
    gpu_lane = where(events["cat"], lambda s: s.isin(GPU_LANE_CATEGORIES))
    gpu_lane |= events["stream"].to_numpy() >= 0
    if gpu_lane.any():
        pid = events["pid"].astype("category").cat.codes.to_numpy()
        gpu_lane |= np.isin(pid, np.unique(pid[gpu_lane]))
    return ~gpu_lane


def step_marks(events: pd.DataFrame) -> np.ndarray:
    """The ProfilerStep#N events that define steps: CPU ones, on the training thread."""
    cpu = on_cpu(events)
    marks = cpu & where(events["name"], lambda s: s.str.match(STEP_PATTERN))
    return marks & on_thread(events, main_thread(events, cpu))


def main_thread(events: pd.DataFrame, cpu: np.ndarray | None = None) -> tuple[str, str] | None:
    """(pid, tid) of the CPU thread that runs the training loop: the one with ProfilerStep#N,
    else the CPU thread with the most operator time. Never a GPU lane."""
    cpu = on_cpu(events) if cpu is None else cpu
    events = events[cpu]
    steps = events[where(events["name"], lambda s: s.str.match(STEP_PATTERN))]
    source = steps if not steps.empty else events[events["cat"] == "cpu_op"]
    if source.empty:
        return None
    busiest = source.groupby(["pid", "tid"], observed=True)["dur"].sum().idxmax()
    return str(busiest[0]), str(busiest[1])


def on_thread(events: pd.DataFrame, thread: tuple[str, str] | None) -> np.ndarray:
    if thread is None:
        return np.zeros(len(events), dtype=bool)
    return where(events["pid"], lambda s: s == thread[0]) & where(
        events["tid"], lambda s: s == thread[1]
    )


def no_steps_reason(path: object, events: pd.DataFrame) -> str:
    """One line for a trace with no step mark on a CPU thread: what was found instead
    (ProfilerStep#N under a GPU lane's category or on a GPU lane's process), or that there
    is none at all, in which case the profiler was not stepped."""
    named = events[where(events["name"], lambda s: s.str.match(STEP_PATTERN))]
    if named.empty:
        return (
            f"{path}: no ProfilerStep#N on a CPU thread to split the trace by; profile with "
            "a torch.profiler schedule and call prof.step() every step"
        )
    found = named.groupby(["cat", "pid"], observed=True).size().sort_values(ascending=False)
    places = ", ".join(f"{n} in category '{cat}' on pid {pid}" for (cat, pid), n in found.items())
    return (
        f"{path}: {len(named)} ProfilerStep#N events, but none on a CPU thread ({places}: "
        f"a GPU lane's category or process, {', '.join(GPU_LANE_CATEGORIES)}), so the trace "
        "cannot be split into steps; steps are read from the CPU's ProfilerStep#N spans "
        "(category user_annotation), which this trace's writer did not keep"
    )
