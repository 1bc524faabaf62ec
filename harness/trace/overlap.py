"""Interval arithmetic over arrays, and the per-step overlap of communication with computation.

Intervals are a pair of float arrays (starts, ends). `merge` turns any set (nested,
overlapping, back-to-back) into sorted disjoint intervals, so nothing is counted twice;
the set operations take and return merged intervals.

Per profiler step (a time window): compute, communication and memory-copy busy time,
overlap = time both computation and communication are busy, overlap % = overlap /
communication time, exposed communication = communication time with no computation,
idle = window time with nothing busy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd

from harness.engines.registry import ENGINES
from harness.trace.classify import (
    COMM,
    COMPUTE,
    MEMORY,
    TraceKind,
    classify,
    collective_api_mask,
    detect_kind,
)
from harness.trace.engine_annotations import GRAMMARS
from harness.trace.lanes import main_thread, on_cpu, on_thread, step_marks, where

_US = 1e-6  # trace times are microseconds; results are seconds


class Intervals(NamedTuple):
    start: np.ndarray
    end: np.ndarray

    @staticmethod
    def empty() -> Intervals:
        return Intervals(np.empty(0), np.empty(0))

    def length(self) -> float:
        return float(np.sum(self.end - self.start))


def merge(start: np.ndarray, end: np.ndarray) -> Intervals:
    """Sorted disjoint union of [start, end) intervals; touching intervals are joined."""
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    keep = end > start
    start, end = start[keep], end[keep]
    if start.size == 0:
        return Intervals.empty()
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    # a new group begins where an interval starts after everything before it has ended
    new_group = np.empty(start.size, dtype=bool)
    new_group[0] = True
    new_group[1:] = start[1:] > reach[:-1]
    first = np.flatnonzero(new_group)
    last = np.append(first[1:], start.size) - 1
    return Intervals(start[first], reach[last])


def _covered(iv: Intervals, points: np.ndarray) -> np.ndarray:
    idx = np.searchsorted(iv.start, points, side="right") - 1
    ok = idx >= 0
    out = np.zeros(points.size, dtype=bool)
    out[ok] = points[ok] < iv.end[idx[ok]]
    return out


def _combine(a: Intervals, b: Intervals, both: bool) -> Intervals:
    """Elementary-segment sweep: keep segments in a and b (both) or in a and not b."""
    edges = np.unique(np.concatenate([a.start, a.end, b.start, b.end]))
    if edges.size < 2:
        return Intervals.empty()
    lo, hi = edges[:-1], edges[1:]
    mid = (lo + hi) / 2
    in_a, in_b = _covered(a, mid), _covered(b, mid)
    keep = in_a & (in_b if both else ~in_b)
    return merge(lo[keep], hi[keep])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    return _combine(a, b, both=True)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    return _combine(a, b, both=False)


def union(*sets: Intervals) -> Intervals:
    return merge(
        np.concatenate([s.start for s in sets]) if sets else np.empty(0),
        np.concatenate([s.end for s in sets]) if sets else np.empty(0),
    )


def clip(iv: Intervals, lo: float, hi: float) -> Intervals:
    """The part of merged intervals inside [lo, hi); sorted input lets us slice first."""
    a = int(np.searchsorted(iv.end, lo, side="right"))
    b = int(np.searchsorted(iv.start, hi, side="left"))
    start, end = np.maximum(iv.start[a:b], lo), np.minimum(iv.end[a:b], hi)
    keep = end > start
    return Intervals(start[keep], end[keep])


class Busy(NamedTuple):
    """Merged busy intervals of one trace, by class."""

    compute: Intervals
    comm: Intervals
    memory: Intervals


def busy_intervals(events: pd.DataFrame, labels: np.ndarray | None = None) -> Busy:
    labels = classify(events) if labels is None else labels
    ts = events["ts"].to_numpy()
    end = ts + events["dur"].to_numpy()

    def of(label: str) -> Intervals:
        m = labels == label
        return merge(ts[m], end[m])

    compute = of(COMPUTE)
    if detect_kind(events) == "cpu":
        # time inside collective calls on the main thread is issuing/waiting, not computing
        api = collective_api_mask(events) & (labels != COMM)
        compute = subtract(compute, merge(ts[api], end[api]))
    return Busy(compute, of(COMM), of(MEMORY))


def step_windows(events: pd.DataFrame, kind: TraceKind | None = None) -> pd.DataFrame:
    """One window [start, end) per profiler step, in trace microseconds.

    CPU: the ProfilerStep#N span on the main thread. GPU: kernels run behind their launch,
    so a step runs from its first device event to the next step's first device event (the
    last step to its last device event); windows tile the device timeline without gaps.
    """
    kind = kind or detect_kind(events)
    steps = events[events["step"].to_numpy() >= 0]
    if kind == "gpu":
        dev = steps[steps["stream"].to_numpy() >= 0]
        if dev.empty:
            return pd.DataFrame(columns=["step", "start", "end"])
        g = dev.assign(end=dev["ts"] + dev["dur"]).groupby("step")
        w = pd.DataFrame({"start": g["ts"].min(), "last": g["end"].max()}).sort_values("start")
        nxt = w["start"].shift(-1)
        w["end"] = nxt.fillna(w["last"]).to_numpy()
        w["end"] = np.maximum(w["end"], w["start"])
        return w.reset_index()[["step", "start", "end"]]
    marks = events[step_marks(events)]
    out = pd.DataFrame({"step": marks["step"].to_numpy(), "start": marks["ts"].to_numpy()}).assign(
        end=(marks["ts"] + marks["dur"]).to_numpy()
    )
    return out.sort_values("start").reset_index(drop=True)


STEP_COLUMNS = [
    "step",
    "window_s",
    "compute_s",
    "comm_s",
    "overlap_s",
    "overlap_pct",
    "exposed_comm_s",
    "memcpy_s",
    "idle_s",
]


def step_table(busy: Busy, windows: pd.DataFrame) -> pd.DataFrame:
    """The overlap figures of every step window (seconds; overlap_pct is NaN with no comm)."""
    rows = []
    for step, lo, hi in windows[["step", "start", "end"]].itertuples(index=False):
        compute = clip(busy.compute, lo, hi)
        comm = clip(busy.comm, lo, hi)
        memory = clip(busy.memory, lo, hi)
        both = intersect(compute, comm).length()
        comm_t = comm.length()
        rows.append(
            {
                "step": int(step),
                "window_s": (hi - lo) * _US,
                "compute_s": compute.length() * _US,
                "comm_s": comm_t * _US,
                "overlap_s": both * _US,
                "overlap_pct": 100.0 * both / comm_t if comm_t > 0 else float("nan"),
                "exposed_comm_s": (comm_t - both) * _US,
                "memcpy_s": memory.length() * _US,
                "idle_s": ((hi - lo) - union(compute, comm, memory).length()) * _US,
            }
        )
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def exposed_gaps(busy: Busy, windows: pd.DataFrame) -> pd.DataFrame:
    """Every stretch of communication with no computation, with its step and offset."""
    gaps = subtract(busy.comm, busy.compute)
    rows = []
    for step, lo, hi in windows[["step", "start", "end"]].itertuples(index=False):
        g = clip(gaps, lo, hi)
        for s, e in zip(g.start, g.end, strict=True):
            rows.append({"step": int(step), "offset_s": (s - lo) * _US, "exposed_s": (e - s) * _US})
    out = pd.DataFrame(rows, columns=["step", "offset_s", "exposed_s"])
    return out.sort_values("exposed_s", ascending=False).reset_index(drop=True)


@functools.cache
def _grammars() -> tuple[Callable[[str], tuple[str, str] | None], ...]:
    """Every registered engine's annotation grammar, each once, in registry order."""
    return tuple(dict.fromkeys(GRAMMARS[label] for label in ENGINES))


def parse_unit_annotation(name: str) -> tuple[str, str] | None:
    """(kind, unit) of an engine annotation, by the first registered engine's grammar that
    reads it: 'yafsdp.all_gather.layers.3' -> ('all_gather', 'layers.3'), 'FSDP::all_gather
    (layers.3)' -> ('all_gather', 'layers.3'), 'yafsdp.all_reduce.clip' -> ('all_reduce',
    'clip'); FSDP1 names carry no unit ('')."""
    for grammar in _grammars():
        found = grammar(name)
        if found is not None:
            return found
    return None


UNIT_COLUMNS = ["annotation", "kind", "unit", "calls", "span_s", "comm_s", "exposed_comm_s"]


def unit_table(events: pd.DataFrame, busy: Busy) -> pd.DataFrame:
    """Communication attributed to the innermost engine annotation that issued it.

    GPU: an NCCL kernel belongs to the innermost annotation around its launch (by
    correlation id) on the launching thread; backward launches come from autograd's device
    thread (pt_autograd_0), not the main one.
    CPU: gloo runs collectives in the order they were issued, so the k-th `gloo:*` span is
    matched to the k-th collective call on the main thread that started before it.
    span_s is the annotations' own (CPU) duration, summed over calls.
    """
    kind = detect_kind(events)
    cpu = on_cpu(events)
    main = main_thread(events, cpu)
    if main is None:
        return pd.DataFrame(columns=UNIT_COLUMNS)
    on_main = on_thread(events, main)
    thread = _thread_ids(events)
    is_unit = where(events["name"], lambda s: s.map(parse_unit_annotation).notna())
    ann_idx = np.flatnonzero((on_main if kind == "cpu" else cpu) & is_unit)
    if ann_idx.size == 0:
        return pd.DataFrame(columns=UNIT_COLUMNS)
    comm_idx, issue_time, issue_thread = collective_issue(events, kind, classify(events, kind))
    per_call = _per_annotation(events, ann_idx, thread, comm_idx, issue_time, issue_thread, busy)
    table = per_call.groupby("annotation", sort=False).agg(
        calls=("span_s", "size"),
        span_s=("span_s", "sum"),
        comm_s=("comm_s", "sum"),
        exposed_comm_s=("exposed_comm_s", "sum"),
    )
    table = table.reset_index()
    # every row's annotation matched a unit pattern when the row was made
    kinds = [parse_unit_annotation(n) or ("", "") for n in table["annotation"]]
    table["kind"] = [k[0] for k in kinds]
    table["unit"] = [k[1] for k in kinds]
    return table[UNIT_COLUMNS]


def collective_issue(
    events: pd.DataFrame, kind: TraceKind, labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indices of the communication events, when each was issued, by which CPU thread);
    NaN / -1 where unknown. GPU: the launch linked by correlation id. CPU: gloo runs
    collectives in the order they were issued, so the k-th `gloo:*` span is matched to
    the k-th collective call on the main thread that started before it."""
    cpu = on_cpu(events)
    thread = _thread_ids(events)
    comm_idx = np.flatnonzero(labels == COMM)
    if kind == "gpu":
        issue_time, issue_thread = _launch_issues(events, comm_idx, cpu, thread)
    else:
        on_main = on_thread(events, main_thread(events, cpu))
        issue_time, issue_thread = _call_issues(events, comm_idx, on_main, thread)
    return comm_idx, issue_time, issue_thread


def _thread_ids(events: pd.DataFrame) -> np.ndarray:
    """One integer per CPU thread, so annotations and launches can be matched by thread."""
    thread = events["pid"].cat.codes.to_numpy().astype(np.int64) << 32
    thread |= events["tid"].cat.codes.to_numpy().astype(np.int64)
    return thread


def _launch_issues(
    events: pd.DataFrame, comm_idx: np.ndarray, cpu: np.ndarray, thread: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """GPU: each collective kernel's launch time and launching thread (by correlation id);
    NaN and -1 where its launch is not in the trace."""
    ts = events["ts"].to_numpy()
    corr = events["correlation"].to_numpy()
    is_launch = cpu & (corr >= 0)
    launches = pd.DataFrame(
        {"ts": ts[is_launch], "thread": thread[is_launch]}, index=corr[is_launch]
    )
    launches = launches[~launches.index.duplicated()].reindex(corr[comm_idx])
    return (
        launches["ts"].to_numpy(dtype=np.float64),
        launches["thread"].fillna(-1).to_numpy(dtype=np.int64),
    )


def _call_issues(
    events: pd.DataFrame, comm_idx: np.ndarray, on_main: np.ndarray, thread: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """CPU: each gloo span's issuing call on the main thread, matched in issue order."""
    ts = events["ts"].to_numpy()
    end = ts + events["dur"].to_numpy()
    issue_time = np.full(comm_idx.size, np.nan)
    issue_thread = np.full(comm_idx.size, -1, dtype=np.int64)
    api = np.flatnonzero(on_main & collective_api_mask(events))
    api = api[np.argsort(ts[api], kind="stable")]
    if api.size == 0:  # no call the classifier knows (another torch's names): unknown
        return issue_time, issue_thread
    # one call per collective: drop API events nested in the call before them
    api = api[np.r_[True, ts[api][1:] >= np.maximum.accumulate(end[api])[:-1]]]
    k = 0
    for j in np.argsort(ts[comm_idx]):
        # skip calls that cannot have issued this span (they start after it)
        if k < api.size and ts[api[k]] <= ts[comm_idx[j]]:
            issue_time[j] = ts[api[k]]
            issue_thread[j] = thread[api[k]]
            k += 1
    return issue_time, issue_thread


def _per_annotation(
    events: pd.DataFrame,
    ann_idx: np.ndarray,
    thread: np.ndarray,
    comm_idx: np.ndarray,
    issue_time: np.ndarray,
    issue_thread: np.ndarray,
    busy: Busy,
) -> pd.DataFrame:
    """One row per annotation call: its span, and the (exposed) communication it issued,
    each collective going to the innermost annotation around its issue on its thread."""
    ts = events["ts"].to_numpy()
    end = ts + events["dur"].to_numpy()
    names = events["name"].to_numpy()
    ann_start, ann_end, ann_thread = ts[ann_idx], end[ann_idx], thread[ann_idx]

    def innermost(t: float, on: int) -> int:
        inside = np.flatnonzero((ann_thread == on) & (ann_start <= t) & (t < ann_end))
        if inside.size == 0:
            return -1
        return int(inside[np.argmax(ann_start[inside])])

    exposed = subtract(busy.comm, busy.compute)
    rows = [
        {"annotation": names[i], "comm_s": 0.0, "exposed_comm_s": 0.0, "span_s": 0.0}
        for i in ann_idx
    ]
    for a, row in enumerate(rows):
        row["span_s"] = (ann_end[a] - ann_start[a]) * _US
    for j, t in enumerate(issue_time):
        a = -1 if np.isnan(t) else innermost(t, issue_thread[j])
        if a < 0:
            continue
        c = Intervals(np.array([ts[comm_idx[j]]]), np.array([end[comm_idx[j]]]))
        rows[a]["comm_s"] += c.length() * _US
        rows[a]["exposed_comm_s"] += intersect(c, exposed).length() * _US
    return pd.DataFrame(rows)
