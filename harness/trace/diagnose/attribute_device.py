"""The exclusive sweep over a GPU's timeline: every microsecond of a step goes to one cause.

Busy time goes to the device event of the highest priority running then: the model's
compute (GEMM and attention before the rest), the engine's kernels, the optimizer's, a
collective (exposed communication: nothing of higher priority runs), a memory copy. Whose
a kernel is comes from the ranges around its launch (`harness.trace.ranges`).

Idle time belongs to the event that ends it, split at that event's launch: before it the
host had not issued the work (in a device synchronisation, an allocator call, or other
work on the launching thread; the outermost CPU operators it was in are named), after it
the work was queued but waited.

An exposed collective that ran longer than its bytes need (`harness.trace.diagnose.yardstick`) gives
that much of its exposed time to `comm.slow`: had it run at the yardstick, it would have
ended that much earlier.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from harness.trace.classify import COMM, COMPUTE, classify
from harness.trace.diagnose import causes as C
from harness.trace.diagnose.host_ops import host_ops_in
from harness.trace.diagnose.yardstick import collective_bytes, collective_kind, needed_us
from harness.trace.lanes import GPU_CATEGORIES, on_cpu, where
from harness.trace.overlap import merge, subtract
from harness.trace.parse import Trace
from harness.trace.ranges import ENGINE, OPTIMIZER, Ranges, thread_ids
from harness.trace.sweep_line import Segments, Tally, covered, paint, segments

GEMM_KERNEL = re.compile(
    r"gemm|cutlass|cublas|xmma|wgmma|flash|fmha|attention|attn|sdpa|conv", re.IGNORECASE
)
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver", "privateuse1_runtime", "privateuse1_driver")
SYNC_CALL = r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|Memcpy|Memset)$"
ALLOCATOR_CALL = r"^(cuda|hip)(Malloc|Free|MallocAsync|FreeAsync|MallocHost|FreeHost|HostAlloc)$"
# sweep priority: lower wins a segment
_PRIORITY = {
    C.COMPUTE_GEMM_ATTENTION: 0, C.COMPUTE_OTHER: 1, C.ENGINE: 2, C.OPTIMIZER: 3,
    "comm": 4, "memory": 5,
}  # fmt: skip


def device_launches(events: pd.DataFrame, device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(launch time, launching thread) of each device event; NaN / -1 where not traced."""
    corr = events["correlation"].to_numpy()
    runtime = on_cpu(events) & (corr >= 0)
    runtime &= where(events["cat"], lambda s: s.isin(RUNTIME_CATEGORIES))
    table = pd.DataFrame(
        {"ts": events["ts"].to_numpy()[runtime], "thread": thread_ids(events)[runtime]},
        index=corr[runtime],
    )
    table = table[~table.index.duplicated()].reindex(corr[device])
    return table["ts"].to_numpy(float), table["thread"].fillna(-1).to_numpy(np.int64)


def _device_events(trace: Trace, probe: dict[str, Any] | None) -> pd.DataFrame:
    """One row per kernel, copy or set: its span, cause, sweep priority, unit (where an
    engine range names one), launch, and the time beyond its yardstick (collectives)."""
    events = trace.events
    labels = classify(events, "gpu")
    device = np.flatnonzero(where(events["cat"], lambda s: s.isin(GPU_CATEGORIES)))
    device = device[events["stream"].to_numpy()[device] >= 0]
    ts = events["ts"].to_numpy()[device]
    dur = events["dur"].to_numpy()[device]
    names = events["name"].to_numpy()[device]
    launch, thread = device_launches(events, device)
    ranges = Ranges(events)
    role, kind, unit = ranges.columns(ranges.innermost(thread, np.nan_to_num(launch, nan=-np.inf)))
    label = labels[device]
    gemm = where(events["name"], lambda s: s.str.contains(GEMM_KERNEL))[device]
    cause = np.where(gemm, C.COMPUTE_GEMM_ATTENTION, C.COMPUTE_OTHER).astype(object)
    cause[role == ENGINE] = C.ENGINE
    cause[role == OPTIMIZER] = C.OPTIMIZER
    priority = np.array([_PRIORITY[c] for c in cause])
    comm = label == COMM
    memory = ~comm & (label != COMPUTE)
    priority[comm], priority[memory] = _PRIORITY["comm"], _PRIORITY["memory"]
    cause[memory & (role == "")] = C.MEMCPY
    comm_names = names[comm].astype(str)
    kinds = {n: collective_kind(n) for n in set(comm_names)}  # once per distinct name
    comm_kind = np.array([kinds[n] for n in comm_names], dtype=object)
    engine_kind = kind[comm]
    comm_kind = np.where(np.isin(engine_kind, C.COLLECTIVE_KINDS), engine_kind, comm_kind)
    cause[comm] = [C.exposed_comm(k) for k in comm_kind]
    need = dur.copy()
    if comm.any():
        nbytes = _bytes_of(trace, device[comm])
        need[comm] = needed_us(comm_kind, nbytes, dur[comm], probe)
    return pd.DataFrame(
        {
            "ts": ts, "end": ts + dur, "dur": dur, "cause": cause, "priority": priority,
            "unit": unit, "launch": launch, "thread": thread, "comm": comm,
            "excess": np.maximum(dur - need, 0.0),
        }
    )  # fmt: skip


def _bytes_of(trace: Trace, rows: np.ndarray) -> np.ndarray:
    coll = trace.collectives
    if coll.empty:
        return np.full(rows.size, np.nan)
    by_row = pd.Series(collective_bytes(coll), index=coll["row"].to_numpy())
    by_row = by_row[~by_row.index.duplicated()]
    return by_row.reindex(rows).to_numpy(float)


def attribute_device(
    trace: Trace, windows: pd.DataFrame, probe: dict[str, Any] | None = None
) -> Tally:
    """Seconds per cause (and unit) of every step window of a GPU trace."""
    dev = _device_events(trace, probe)
    seg = segments([dev["ts"].to_numpy(), dev["end"].to_numpy()], windows)
    start, end = dev["ts"].to_numpy(), dev["end"].to_numpy()
    order = np.lexsort((start, -dev["priority"].to_numpy()))
    owner = paint(seg, start, end, order)
    tally = Tally(len(windows))
    busy = owner >= 0
    o = owner[busy]
    cause = dev["cause"].to_numpy()[o]
    unit = dev["unit"].to_numpy()[o]
    tally.add(seg.window[busy], cause, seg.length[busy], unit)
    _move_slow(tally, dev, seg, owner)
    _attribute_gaps(tally, trace, dev, seg, owner)
    return tally


def _move_slow(tally: Tally, dev: pd.DataFrame, seg: Segments, owner: np.ndarray) -> None:
    """Of each exposed collective's exposed time, the part its bytes did not need moves to
    comm.slow (split across windows in proportion to its exposed time in each)."""
    comm_seg = (owner >= 0) & (seg.window >= 0)
    comm_seg[comm_seg] = dev["comm"].to_numpy()[owner[comm_seg]]
    if not comm_seg.any():
        return
    frame = pd.DataFrame(
        {"k": owner[comm_seg], "w": seg.window[comm_seg], "us": seg.length[comm_seg]}
    )
    exposed = frame.groupby(["k", "w"])["us"].sum().reset_index()
    total = exposed.groupby("k")["us"].transform("sum").to_numpy()
    excess = dev["excess"].to_numpy()[exposed["k"].to_numpy()]
    slow = exposed["us"].to_numpy() * np.minimum(1.0, excess / np.maximum(total, 1e-300))
    cause = dev["cause"].to_numpy()[exposed["k"].to_numpy()]
    unit = dev["unit"].to_numpy()[exposed["k"].to_numpy()]
    w = exposed["w"].to_numpy()
    for wi, c, u, s in zip(w.tolist(), cause, unit, slow.tolist(), strict=True):
        if s <= 0:
            continue
        tally.causes[wi][c] -= s * 1e-6
        tally.causes[wi][C.COMM_SLOW] = tally.causes[wi].get(C.COMM_SLOW, 0.0) + s * 1e-6
        if u:
            tally.units[wi][c][u] -= s * 1e-6
            slow_units = tally.units[wi].setdefault(C.COMM_SLOW, {})
            slow_units[u] = slow_units.get(u, 0.0) + s * 1e-6


def _gaps(seg: Segments, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, window) of each run of idle segments inside one window."""
    idle = (owner < 0) & (seg.window >= 0)
    idx = np.flatnonzero(idle)
    if idx.size == 0:
        return np.empty(0), np.empty(0), np.empty(0, dtype=np.int64)
    joined = (seg.start[idx[1:]] == seg.end[idx[:-1]]) & (
        seg.window[idx[1:]] == seg.window[idx[:-1]]
    )
    first = idx[np.r_[True, ~joined]]
    last = idx[np.r_[~joined, True]]
    return seg.start[first], seg.end[last], seg.window[first]


def _attribute_gaps(
    tally: Tally, trace: Trace, dev: pd.DataFrame, seg: Segments, owner: np.ndarray
) -> None:
    g0, g1, w = _gaps(seg, owner)
    if g0.size == 0:
        return
    # the event that ends each gap: the one starting at its end (the earliest launched)
    by_start = np.lexsort((dev["launch"].fillna(np.inf).to_numpy(), dev["ts"].to_numpy()))
    starts = dev["ts"].to_numpy()[by_start]
    j = np.searchsorted(starts, g1, side="left")
    found = (j < starts.size) & (starts[np.clip(j, 0, starts.size - 1)] == g1)
    ender = np.where(found, by_start[np.clip(j, 0, starts.size - 1)], -1)
    launch = np.where(ender >= 0, dev["launch"].to_numpy()[np.clip(ender, 0, None)], np.nan)
    thread = np.where(ender >= 0, dev["thread"].to_numpy()[np.clip(ender, 0, None)], -1)
    known = ~np.isnan(launch)
    split = np.clip(np.where(known, launch, g0), g0, g1)
    tally.add(w[~known], np.full((~known).sum(), C.UNATTRIBUTED, dtype=object), (g1 - g0)[~known])
    tally.add(w[known], np.full(known.sum(), C.QUEUED, dtype=object), (g1 - split)[known])
    sync_us, alloc_us = _host_calls_in(trace, thread, g0, split)
    ops = host_ops_in(trace.events, thread, g0, np.where(known, split, g0), w)
    for wi, name, seconds in ops.itertuples(index=False):
        tally.host_ops[int(wi)][str(name)] = float(seconds)
    host = np.where(known, split - g0, 0.0)
    other = host - sync_us - alloc_us
    for cause, us in ((C.HOST_SYNC, sync_us), (C.HOST_ALLOCATOR, alloc_us), (C.HOST_OTHER, other)):
        tally.add(w, np.full(w.size, cause, dtype=object), np.where(known, us, 0.0))


def _host_calls_in(
    trace: Trace, thread: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Time in synchronisation calls, and in allocator calls outside them, on each gap's
    launching thread within [lo, hi)."""
    events = trace.events
    name = events["name"]
    sync = where(name, lambda s: s.str.match(SYNC_CALL))
    alloc = where(name, lambda s: s.str.match(ALLOCATOR_CALL))
    sync_us, alloc_us = np.zeros(lo.size), np.zeros(lo.size)
    if not (sync.any() or alloc.any()):
        return sync_us, alloc_us
    threads = thread_ids(events)
    ts = events["ts"].to_numpy()
    end = ts + events["dur"].to_numpy()
    for th in np.unique(thread[thread >= 0]):
        q = thread == th
        mine = threads == th
        s_iv = merge(ts[sync & mine], end[sync & mine])
        a_iv = subtract(merge(ts[alloc & mine], end[alloc & mine]), s_iv)
        sync_us[q] = covered(s_iv, lo[q], hi[q])
        alloc_us[q] = covered(a_iv, lo[q], hi[q])
    return sync_us, alloc_us
