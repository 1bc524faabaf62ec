"""A step's critical path on a GPU trace: from the step's last device event back to its
start, each event reached through the edge that released it last.

The edges: a stream's order (a kernel starts after the one before it on its stream), the
launch (a kernel starts after the host launched it), a stream's wait on an event recorded
on another stream (Kineto's `cuda_sync` "Stream Wait Event", recorded with
`enable_cuda_sync_events`), a host synchronisation (the call returns when the device work
it waits for ends), the host thread's order (a call starts after the one before it on its
thread), and across ranks, a collective's wait for its last rank (`harness.trace.diagnose.ranks`).

Walking back, an event's binding edge is the one whose release came last before the event
began; the time from that release to the event's start is on the path only when it is short
(`TIGHT_US`: launch latency), else it is a gap no edge explains. The path's length is the
time it accounts for; where it covers less of the step than `AGREEMENT` (edges missing:
no sync events, an untraced thread), the result says so and its segments are not a split
of the step. No torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.trace.diagnose.ranks import CrossRank, split_collectives
from harness.trace.lanes import GPU_CATEGORIES, on_cpu, where
from harness.trace.parse import Trace, TraceError, _open_text, _Stream
from harness.trace.ranges import thread_ids
from harness.trace.summary import Analysis

_US = 1e-6
TIGHT_US = 10.0  # a release this close before an event's start is its cause
AGREEMENT = 0.03  # the path must cover the step within this fraction to stand for it
_RUNTIME = ("cuda_runtime", "cuda_driver", "privateuse1_runtime", "privateuse1_driver")
_HOST_SYNC = r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize)$"


def read_syncs(path: Path | str) -> pd.DataFrame:
    """The `cuda_sync` events of a trace file with the args the walk needs: kind, ts, end,
    stream (the waiting stream, -1 for the host), wait_on_stream, record_corr, corr."""
    rows = []
    with _open_text(Path(path)) as fh:
        s = _Stream(fh)
        events = s.array_items() if s.peek() == "[" else _trace_events(s)
        for e in events:
            if isinstance(e, dict) and e.get("cat") == "cuda_sync" and e.get("ph") == "X":
                a = e.get("args") or {}
                rows.append((str(a.get("cuda_sync_kind", e.get("name", ""))), float(e["ts"]),
                             float(e["ts"]) + float(e.get("dur", 0.0)), int(a.get("stream", -1)),
                             int(a.get("wait_on_stream", -1)),
                             int(a.get("wait_on_cuda_event_record_corr_id", -1)),
                             int(a.get("correlation", -1))))  # fmt: skip
    cols = ["kind", "ts", "end", "stream", "wait_on_stream", "record_corr", "corr"]
    return pd.DataFrame(rows, columns=cols)


def _trace_events(s: _Stream) -> Any:
    s.take("{")
    while s.peek() != "}":
        key = s.value()
        s.take(":")
        if key == "traceEvents":
            yield from s.array_items()
        else:
            s.value()
        if s.peek() == ",":
            s.pos += 1
    s.take("}")


@dataclass(frozen=True)
class Segment:
    rank: int
    what: str  # 'kernel', 'host', 'edge' (launch latency), 'gap' (off the path)
    name: str
    seconds: float
    via: str = ""  # the edge that released it: 'stream order', 'stream wait', 'launch', ...


@dataclass(frozen=True)
class CriticalPath:
    rank: int
    step: int
    step_s: float
    path_s: float  # the time the path accounts for
    segments: list[Segment] = field(default_factory=list)  # from the step's end backwards

    @property
    def agrees(self) -> bool:
        return abs(self.step_s - self.path_s) <= AGREEMENT * self.step_s

    def verdict(self) -> str:
        share = 100 * self.path_s / self.step_s if self.step_s > 0 else 0.0
        if self.agrees:
            return f"the critical path covers {share:.1f}% of the step: its segments split it"
        return (
            f"the critical path covers only {share:.1f}% of the step (more than "
            f"{AGREEMENT:.0%} off): edges are missing (no CUDA sync events, or an untraced "
            "thread), so the path does not split the step"
        )


class _Lanes:
    """Per lane (a stream, a thread), its events sorted by end: the last to end by a time
    is one binary search away (a walk asks this at every step)."""

    def __init__(self, lane: np.ndarray, end: np.ndarray) -> None:
        self.by_lane: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for value in np.unique(lane):
            idx = np.flatnonzero(lane == value)
            idx = idx[np.argsort(end[idx], kind="stable")]
            self.by_lane[int(value)] = (end[idx], idx)

    def last_ended(self, lane: int, t: float) -> int:
        """The event of `lane` that ended last at or before t (-1: none)."""
        ends, idx = self.by_lane.get(lane, (np.empty(0), np.empty(0, dtype=np.int64)))
        k = int(np.searchsorted(ends, t + 1e-9, side="right")) - 1
        return int(idx[k]) if k >= 0 else -1


class RankGraph:
    """One rank's device events, their launches, the sync events and its host threads."""

    def __init__(self, trace: Trace, syncs: pd.DataFrame, rank: int, offset_us: float = 0.0):
        ev = trace.events
        self.rank, self.offset = rank, offset_us  # times are shifted onto the first rank's
        names = ev["name"].to_numpy().astype(str)
        dev = where(ev["cat"], lambda s: s.isin(GPU_CATEGORIES)) & (ev["stream"].to_numpy() >= 0)
        d = np.flatnonzero(dev)
        d = d[np.argsort(ev["ts"].to_numpy()[d], kind="stable")]
        self.d_start = ev["ts"].to_numpy()[d] - offset_us
        self.d_end = self.d_start + ev["dur"].to_numpy()[d]
        self.d_stream = ev["stream"].to_numpy()[d]
        self.d_corr = ev["correlation"].to_numpy()[d]
        self.d_name = names[d]
        self.d_trace_start = ev["ts"].to_numpy()[d]  # the rank's own clock
        host = np.flatnonzero(
            on_cpu(ev) & where(ev["cat"], lambda s: s.isin(("cpu_op", *_RUNTIME)))
        )
        self.h_start = ev["ts"].to_numpy()[host] - offset_us
        self.h_end = self.h_start + ev["dur"].to_numpy()[host]
        self.h_thread = thread_ids(ev)[host]
        self.h_name = names[host]
        self.h_corr = ev["correlation"].to_numpy()[host]
        self.h_sync = pd.Series(self.h_name).str.match(_HOST_SYNC).to_numpy()
        self.syncs = syncs.assign(ts=syncs["ts"] - offset_us, end=syncs["end"] - offset_us)
        runtime = where(ev["cat"], lambda s: s.isin(_RUNTIME))[host] & (self.h_corr >= 0)
        # the runtime call that launched each correlation id (the first, if several)
        self.launch = {int(c): int(h) for h, c in reversed(list(zip(
            np.flatnonzero(runtime), self.h_corr[runtime], strict=True)))}  # fmt: skip
        self._d_lane = _Lanes(self.d_stream, self.d_end)
        self._h_lane = _Lanes(self.h_thread, self.h_end)

    def last_before(self, stream: int, corr: int) -> int:
        """The device event on `stream` launched last before correlation `corr` (-1: none)."""
        m = np.flatnonzero((self.d_stream == stream) & (self.d_corr >= 0) & (self.d_corr < corr))
        return int(m[np.argmax(self.d_corr[m])]) if m.size else -1

    def releases(self, i: int) -> list[tuple[float, tuple[str, int], str]]:
        """(release time, node, edge) of everything device event i waited for."""
        out = []
        j = self._d_lane.last_ended(int(self.d_stream[i]), float(self.d_start[i]))
        if j >= 0:
            out.append((float(self.d_end[j]), ("dev", j), "stream order"))
        corr = int(self.d_corr[i])
        h = self.launch.get(corr, -1)
        if h >= 0:
            out.append((float(self.h_end[h]), ("host", h), "launch"))
        waits = self.syncs[(self.syncs["stream"] == self.d_stream[i]) & (self.syncs["corr"] < corr)
                           & (self.syncs["kind"] == "Stream Wait Event")]  # fmt: skip
        if not waits.empty:
            w = waits.loc[waits["corr"].idxmax()]
            j = self.last_before(int(w["wait_on_stream"]), int(w["record_corr"]))
            if j >= 0:
                out.append((float(self.d_end[j]), ("dev", j), "stream wait"))
        return out

    def host_releases(self, h: int) -> list[tuple[float, tuple[str, int], str]]:
        """What host call h waited for: the device (a sync call) or its thread's previous call."""
        out = []
        if self.h_sync[h]:
            ended = np.flatnonzero(
                (self.d_end <= self.h_end[h] + 1e-9) & (self.d_end >= self.h_start[h])
            )
            if ended.size:
                j = int(ended[np.argmax(self.d_end[ended])])
                out.append((float(self.d_end[j]), ("dev", j), "synchronisation"))
        k = self._h_lane.last_ended(int(self.h_thread[h]), float(self.h_start[h]))
        if k >= 0:
            out.append((float(self.h_end[k]), ("host", k), "host order"))
        return out


Node = tuple[int, str, int]  # (rank, 'dev' | 'host', index)
# a collective's wait for its last rank: (rank, device index) -> (late rank, its device
# index, the last arrival on the shared clock)
CrossEdges = dict[tuple[int, int], tuple[int, int, float]]


@dataclass
class _Walk:
    lo: float
    hi: float
    segments: list[Segment] = field(default_factory=list)
    path_us: float = 0.0
    via: str = ""  # the edge that led to the next segment

    def on_path(self, rank: int, what: str, name: str, a: float, b: float) -> None:
        us = max(min(b, self.hi) - max(a, self.lo), 0.0)
        if us > 0:
            self.path_us += us
            self.segments.append(Segment(rank, what, str(name), us * _US, self.via))

    def off_path(self, rank: int, a: float, b: float) -> None:
        us = max(min(b, self.hi) - max(a, self.lo), 0.0)
        if us > 0:
            self.segments.append(Segment(rank, "gap", "no edge explains it", us * _US))


def _step_back(
    graphs: dict[int, RankGraph], node: Node, t: float, walk: _Walk, cross: CrossEdges
) -> tuple[Node, float] | None:
    """Account for `node` up to cursor t, and return the node that released it, with the
    release time; None at the start of the trace."""
    rank, kind, i = node
    g = graphs[rank]
    if kind == "dev":
        edge = cross.get((rank, i))
        if edge is not None and edge[0] != rank and edge[2] < t:
            late, j, last = edge
            name = f"{g.d_name[i]} (transfer after rank {late} arrived last)"
            walk.on_path(rank, "kernel", name, last, t)
            return (late, "dev", j), last
        start = float(g.d_start[i])
        walk.on_path(rank, "kernel", g.d_name[i], start, t)
        found = [r for r in g.releases(i) if r[0] <= start + 1e-6]
    else:
        start = float(g.h_start[i])
        found = [r for r in g.host_releases(i) if r[0] <= t + 1e-6]
        synced = [r for r in found if r[2] == "synchronisation" and r[0] > start]
        if synced:  # the call returned when the device work it waited for ended
            rel, nxt, edge_name = synced[0]
            walk.on_path(rank, "host", f"{g.h_name[i]} (returns)", rel, t)
            walk.via = edge_name
            return (rank, *nxt), rel
        walk.on_path(rank, "host", g.h_name[i], start, t)
        found = [r for r in found if r[0] <= start + 1e-6]
    if not found:
        return None
    rel, nxt, edge_name = max(found, key=lambda r: r[0])
    if start - rel <= TIGHT_US:
        walk.via = edge_name
        walk.on_path(rank, "edge", edge_name, rel, start)
    else:
        walk.off_path(rank, rel, start)
    walk.via = edge_name
    return (rank, *nxt), rel


def critical_path(
    graphs: dict[int, RankGraph],
    rank: int,
    step: int,
    window: tuple[float, float],
    cross: CrossEdges | None = None,
) -> CriticalPath:
    """The critical path of `rank`'s step in `window` (the first rank's clock)."""
    lo, hi = window
    g = graphs[rank]
    walk = _Walk(lo, hi)
    inside = np.flatnonzero((g.d_end <= hi + 1e-6) & (g.d_end > lo))
    if inside.size:
        i = int(inside[np.argmax(g.d_end[inside])])
        walk.off_path(rank, float(g.d_end[i]), hi)
        at: tuple[Node, float] | None = ((rank, "dev", i), float(g.d_end[i]))
        for _ in range(sum(x.d_start.size + x.h_start.size for x in graphs.values())):
            if at is None or at[1] <= lo:
                break
            at = _step_back(graphs, at[0], at[1], walk, cross or {})
    return CriticalPath(rank, step, (hi - lo) * _US, walk.path_us * _US, walk.segments)


def cross_edges(graphs: dict[int, RankGraph], cross: CrossRank) -> CrossEdges:
    """The waits for a last rank, as edges between the ranks' device events."""
    where_is = {(r, float(t)): i for r, g in graphs.items() for i, t in enumerate(g.d_trace_start)}
    by_key = {(s.rank, s.lane, s.step, s.order): s for s in cross.splits}
    out: CrossEdges = {}
    for s in cross.splits:
        if s.late_rank is None or s.late_rank == s.rank or s.wait_s <= 0:
            continue
        late = by_key.get((s.late_rank, s.lane, s.step, s.order))
        i = where_is.get((s.rank, s.start_us))
        j = where_is.get((s.late_rank, late.start_us)) if late else None
        if late is not None and i is not None and j is not None:
            out[(s.rank, i)] = (s.late_rank, j, late.start_us - cross.offsets_us[s.late_rank])
    return out


def critical_paths(analyses: list[Analysis], job: str) -> list[CriticalPath]:
    """Every rank's every step of a GPU job (its ranks' analysed traces), with the
    cross-rank edges; `job` names it in an error."""
    cross = split_collectives(analyses)
    graphs = {
        a.rank: RankGraph(a.trace, read_syncs(a.trace.path), a.rank, cross.offsets_us[a.rank])
        for a in analyses
        if a.kind == "gpu"
    }
    if not graphs:
        raise TraceError(f"{job}: a critical path needs GPU traces (kernels on streams)")
    edges = cross_edges(graphs, cross)
    out = []
    for a in analyses:
        offset = cross.offsets_us[a.rank]
        for step, lo, hi in a.windows[["step", "start", "end"]].itertuples(index=False):
            out.append(critical_path(graphs, a.rank, int(step), (lo - offset, hi - offset), edges))
    return out


def path_lines(path: CriticalPath, shown: int = 8) -> list[str]:
    """The verdict, then the path's largest segments from the end of the step back."""
    lines = [f"rank {path.rank} step {path.step}: {path.verdict()}"]
    on_path = [s for s in path.segments if s.what != "gap"]
    big = sorted(on_path, key=lambda s: -s.seconds)[:shown]
    for s in (s for s in on_path if s in big):
        via = f" <- {s.via}" if s.via else ""
        lines.append(f"  rank {s.rank} {s.what} {s.seconds * 1e3:.3f} ms {s.name}{via}")
    gaps = sum(s.seconds for s in path.segments if s.what == "gap")
    if gaps:
        lines.append(f"  gaps no edge explains: {gaps * 1e3:.3f} ms")
    return lines
