"""Across ranks: match each collective's instances, align the ranks' clocks, and split each
rank's collective into the wait for the last rank to arrive and the transfer after it.

A collective's instances are matched by process group and call order within the step: the
group is the one Kineto records on the kernel ("Process Group Name"); where the trace has
none, the lane stands for it (NCCL runs each communicator's kernels on a stream of its own,
in call order; on CPU all `gloo:*` spans form one lane), streams numbered per rank by the
first collective they ran, so ranks whose stream ids differ still match. An instance whose
kind differs between ranks is dropped, and counted.

Clocks: a collective ends at nearly the same moment on every rank (the last chunk lands
everywhere at once), so each rank's offset from the first rank is the median, over the
matched instances, of its end less the first rank's end.

Arrival: a rank's collective kernel (or gloo span) starts when that rank arrives; it then
spins until the last rank arrives. On rank r, [start, last arrival) is the wait and the
rest is the transfer. The late rank is named, with what it was doing meanwhile. No torch.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from harness.trace.classify import COMM
from harness.trace.diagnose import causes
from harness.trace.diagnose.attribute import StepAttribution
from harness.trace.diagnose.attribute_device import attribute_device
from harness.trace.diagnose.attribute_host import attribute_host
from harness.trace.diagnose.yardstick import collective_kind
from harness.trace.overlap import Intervals, intersect, subtract
from harness.trace.summary import Analysis

_US = 1e-6
# the part of an exposed collective spent waiting for the last rank: by_unit names the rank
SKEW = "comm.skew"
SKEW_DESCRIPTION = "exposed wait for a rank that arrived late at a collective"


@dataclass(frozen=True)
class Instance:
    """One rank's run of one collective, in that rank's own microseconds."""

    rank: int
    lane: str  # the process group's name where the trace records it, else the stream's
    # number by first use on this rank
    step: int
    order: int  # call order within the step, on the lane
    kind: str
    start: float
    end: float


def instances(a: Analysis) -> list[Instance]:
    """Every collective kernel (GPU) or gloo span (CPU) of one rank's trace, inside a step."""
    ev = a.trace.events
    idx = np.flatnonzero((a.labels == COMM) & (ev["step"].to_numpy() >= 0))
    ts, dur = ev["ts"].to_numpy()[idx], ev["dur"].to_numpy()[idx]
    steps = ev["step"].to_numpy()[idx]
    names = ev["name"].to_numpy()[idx]
    streams = ev["stream"].to_numpy()[idx] if a.kind == "gpu" else np.zeros(idx.size, int)
    recorded = a.trace.collectives
    groups = dict(zip(recorded["row"], recorded["group"], strict=True))
    order = np.lexsort((ts, steps))
    first_use: dict[int, int] = {}
    counters: Counter[tuple[str, int]] = Counter()
    out = []
    for j in order:
        group = groups.get(int(idx[j]), "")
        number = first_use.setdefault(int(streams[j]), len(first_use))
        lane = f"group {group}" if group else f"lane {number}"
        key = (lane, int(steps[j]))
        out.append(
            Instance(
                a.rank,
                lane,
                int(steps[j]),
                counters[key],
                collective_kind(str(names[j])),
                float(ts[j]),
                float(ts[j] + dur[j]),
            )  # fmt: skip
        )
        counters[key] += 1
    return out


Key = tuple[str, int, int]  # (lane, step, order)


def match(per_rank: dict[int, list[Instance]]) -> tuple[dict[Key, dict[int, Instance]], int]:
    """Instances present on every rank with one kind, by key; and how many keys were dropped
    (missing on a rank, or of different kinds)."""
    by_key: dict[Key, dict[int, Instance]] = defaultdict(dict)
    for rank, found in per_rank.items():
        for i in found:
            by_key[(i.lane, i.step, i.order)][rank] = i
    ranks = set(per_rank)
    kept = {
        k: v
        for k, v in by_key.items()
        if set(v) == ranks and len({i.kind for i in v.values()}) == 1
    }
    return kept, len(by_key) - len(kept)


def clock_offsets(matched: dict[Key, dict[int, Instance]], ranks: list[int]) -> dict[int, float]:
    """Microseconds to subtract from each rank's times to put them on the first rank's clock."""
    ref = min(ranks)
    offsets = {ref: 0.0}
    for r in ranks:
        if r == ref:
            continue
        diffs = [v[r].end - v[ref].end for v in matched.values()]
        offsets[r] = float(np.median(diffs)) if diffs else 0.0
    return offsets


@dataclass(frozen=True)
class CollectiveSplit:
    """One rank's instance of a matched collective, split at the last rank's arrival."""

    rank: int
    step: int
    lane: str
    order: int
    kind: str
    start_us: float  # the rank's own clock
    wait_s: float  # from its arrival to the last rank's
    transfer_s: float  # the rest of the collective
    late_rank: int | None  # None: every rank arrived at once
    because: str  # the late rank's cause meanwhile (a name of harness.trace.diagnose.causes), or ''


@dataclass(frozen=True)
class CrossRank:
    offsets_us: dict[int, float]
    splits: list[CollectiveSplit]
    unmatched: int  # collective instances that could not be matched on every rank
    warnings: list[str] = field(default_factory=list)


def gap_causes(a: Analysis, gaps: list[tuple[float, float]]) -> list[str]:
    """The attribution's largest cause in each [lo, hi) of one rank's own clock: its sweep
    run once over windows cut at every gap's bounds."""
    if not gaps:
        return []
    cuts = np.unique(np.array(gaps, dtype=np.float64).ravel())
    windows = pd.DataFrame({"step": np.arange(cuts.size - 1), "start": cuts[:-1], "end": cuts[1:]})
    if a.kind == "gpu":
        tally = attribute_device(a.trace, windows)
    else:
        tally = attribute_host(a.trace, windows)
    out = []
    for lo, hi in gaps:
        total: Counter[str] = Counter()
        for w in range(int(np.searchsorted(cuts, lo)), int(np.searchsorted(cuts, hi))):
            total.update(tally.causes[w])
        out.append(max(total, key=lambda c: total[c]) if total else causes.UNATTRIBUTED)
    return out


@dataclass(frozen=True)
class _Arrivals:
    group: dict[int, Instance]
    last: float  # the last arrival, on the first rank's clock
    late: int | None
    gap: tuple[float, float]  # on the late rank's clock: the first arrival to its own


def _arrivals(group: dict[int, Instance], offsets: dict[int, float]) -> _Arrivals:
    arrival = {r: i.start - offsets[r] for r, i in group.items()}
    latest = max(arrival, key=lambda r: (arrival[r], -r))
    last, earliest = arrival[latest], min(arrival.values())
    if earliest >= last:
        return _Arrivals(group, last, None, (0.0, 0.0))
    return _Arrivals(group, last, latest, (earliest + offsets[latest], last + offsets[latest]))


def split_collectives(analyses: list[Analysis]) -> CrossRank:
    """Every rank's matched collectives, split into the wait for the last arrival and the
    transfer; the late rank named with its cause in the time the others waited for it."""
    by_rank = {a.rank: a for a in analyses}
    matched, unmatched = match({r: instances(a) for r, a in by_rank.items()})
    offsets = clock_offsets(matched, sorted(by_rank))
    warnings = []
    world = max(int((a.trace.metadata.get("distributedInfo") or {}).get("world_size", 0) or 0)
                for a in analyses)  # fmt: skip
    if world > len(by_rank):
        warnings.append(
            f"only {len(by_rank)} of {world} ranks traced: a late rank named is the latest "
            "of those traced, and a wait may be for a rank not traced"
        )
    if unmatched:
        warnings.append(
            f"{unmatched} collective instance(s) not found on every rank with one kind; "
            "left out of the cross-rank split"
        )
    found = [_arrivals(matched[key], offsets) for key in sorted(matched)]
    because: dict[int, str] = {}
    for rank, a in by_rank.items():
        late = [j for j, f in enumerate(found) if f.late == rank]
        because.update(zip(late, gap_causes(a, [found[j].gap for j in late]), strict=True))
    splits = []
    for j, f in enumerate(found):
        for r, i in sorted(f.group.items()):
            dur = i.end - i.start
            wait = float(np.clip(f.last - (i.start - offsets[r]), 0.0, dur))
            splits.append(
                CollectiveSplit(
                    r,
                    i.step,
                    i.lane,
                    i.order,
                    i.kind,
                    i.start,
                    wait * _US,
                    (dur - wait) * _US,
                    f.late,
                    because.get(j, ""),
                )  # fmt: skip
            )
    return CrossRank(offsets, splits, unmatched, warnings)


Skew = dict[tuple[int, str], float]  # (late rank, collective kind) -> seconds


def exposed_skew(a: Analysis, splits: list[CollectiveSplit]) -> dict[int, Skew]:
    """Per step, per late rank and collective kind: the seconds of this rank's exposed
    communication that lie in its waits for that late rank."""
    exposed = subtract(a.busy.comm, a.busy.compute)
    out: dict[int, Skew] = defaultdict(lambda: defaultdict(float))
    for s in splits:
        if s.rank != a.rank or s.late_rank is None or s.wait_s <= 0:
            continue
        wait = Intervals(np.array([s.start_us]), np.array([s.start_us + s.wait_s / _US]))
        seconds = intersect(wait, exposed).length() * _US
        if seconds > 0:
            out[s.step][(s.late_rank, s.kind)] += seconds
    return {step: dict(v) for step, v in out.items()}


def _take(
    new: dict[str, float], by_unit: dict[str, dict[str, float]], cause: str, want: float
) -> float:
    """Take up to `want` seconds from `cause` (and its units, in proportion); how much."""
    held = new.get(cause, 0.0)
    moved = min(want, held)
    if moved <= 0:
        return 0.0
    new[cause] = held - moved
    for unit in by_unit.get(cause, {}):
        by_unit[cause][unit] *= 1 - moved / held
    return moved


def with_skew(step: StepAttribution, skew: Skew) -> StepAttribution:
    """The step with its exposed waits for late ranks moved into SKEW, whose by_unit names
    the late rank: out of the exposed collective of their kind first, then out of the other
    exposed collectives (the attribution may name a collective by the engine's range where
    the trace names another: gloo's reduce-scatter is an all-reduce), each cause's units in
    proportion. Never more than they hold: the causes still sum to the step."""
    new, by_unit = dict(step.causes), {c: dict(u) for c, u in step.by_unit.items()}
    late: dict[str, float] = defaultdict(float)
    exposed = [c for c in causes.EXPOSED_COMM if c != causes.COMM_SLOW]
    for (rank, kind), want in sorted(skew.items(), key=lambda kv: -kv[1]):
        own = causes.exposed_comm(kind)
        moved = _take(new, by_unit, own, want)
        for other in (c for c in exposed if c != own):
            moved += _take(new, by_unit, other, want - moved)
        late[f"rank {rank}"] += moved
    late = {r: v for r, v in late.items() if v > 0}
    if not late:
        return step
    new[SKEW] = sum(late.values())
    by_unit[SKEW] = dict(sorted(late.items()))
    return replace(step, causes=new, by_unit=by_unit)


def late_arrivals(cross: CrossRank, shown: int = 3) -> list[str]:
    """The `shown` largest (late rank, cause) pairs, one line each: 'skew: rank 1 arrived
    late, because host.other (12 collectives, 40.000 ms per step waited by the others)'."""
    waited: dict[tuple[int, str], float] = defaultdict(float)
    count: Counter[tuple[int, str]] = Counter()
    steps = len({s.step for s in cross.splits}) or 1
    for s in cross.splits:
        if s.late_rank is None:
            continue
        if s.rank == s.late_rank:
            count[(s.late_rank, s.because)] += 1
        else:
            waited[(s.late_rank, s.because)] += s.wait_s
    ranked = sorted(waited.items(), key=lambda kv: -kv[1])
    lines = [
        f"skew: rank {rank} arrived late, because {because} ({count[(rank, because)]} "
        f"collectives, {seconds / steps * 1e3:.3f} ms per step waited by the others)"
        for (rank, because), seconds in ranked[:shown]
    ]
    if len(ranked) > shown:
        rest = sum(v for _, v in ranked[shown:]) / steps
        lines.append(f"skew: {len(ranked) - shown} more, {rest * 1e3:.3f} ms per step")
    return lines
