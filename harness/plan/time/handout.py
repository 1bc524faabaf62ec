"""Who gets the SMs: the give-way waits of side kernels and collectives, and the slowest rank.

The rules (`give_way.py` holds their constants and sources):
- R1. A kernel on a stream of the compute stream's priority that becomes ready while a
  compute kernel holds the SMs waits for that kernel's last wave (about its end).
- R2. In a chain of such kernels (each ready when the one before ends), each after the
  first waits for one more compute kernel: the one that started while it ran. A kernel
  launched in several pieces (32-bit indexing) is such a chain.
- R3. A collective is a kernel too: it needs SMs of its own, so it waits as its stream's
  priority says (R1, or R4), and if it follows a chain, one more compute kernel (R2).
- R4. A kernel on a higher-priority stream waits about one wave of the running kernel.
- R5. Across W ranks a collective starts when the last rank is ready. Each rank meets the
  chain's first wait at its own phase of the running kernel, uniform over the kernel's
  spread s; this rank's own wait is a (as the program has it). The other W-1 ranks' waits
  are independent uniforms on [0, s], so the expected start is
      s * E[max(a/s, M)],  M the largest of W-1 uniforms on [0, 1],
      E[max(x, M)] = x**W + (W-1)/W * (1 - x**W),
  and the slowest rank adds s * (E[max(x, M)] - x): 0 at W = 1, towards s - a as W grows.
  With `per_link` the same holds for the chain's whole wait: each later link's race is a
  distribution of its own, and the collective waits the expected largest sum over W ranks
  (`slowest_rank.py`).

The simulator (`simulate.py`) runs the program once without these waits, finds with this
module which compute kernel each side kernel or collective meets, and runs it again with
the waits added to their starts.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from harness.plan.time.give_way import GiveWayConstants
from harness.plan.time.simulate_ops import COMM, COMPUTE, SIDE_STREAMS, Op, Timeline
from harness.plan.time.slowest_rank import expected_chain_extra

# Waves of a memory-bound kernel when its size is not known: thousands (one wave is
# negligible), see GiveWayConstants.memory_kernel_waves.
MANY_WAVES = 1e4


@dataclass(frozen=True)
class HandOut:
    """The rules' inputs: each stream's priority, the constants, the world, the switches."""

    priorities: dict[str, int]
    constants: GiveWayConstants = field(default_factory=GiveWayConstants)
    world_size: int = 1
    give_way: bool = True
    slowest_rank: bool = True
    per_link: bool = False  # R5 at every link of a chain (`slowest_rank.py`), not the first


@dataclass
class Waits:
    """Per operation: the give-way wait added to its start, the slowest rank's, and for a
    collective the side kernels of its chain (for the cycle's explanation)."""

    give_way: dict[str, float] = field(default_factory=dict)
    slowest_rank: dict[str, float] = field(default_factory=dict)
    chain: dict[str, tuple[str, ...]] = field(default_factory=dict)


def expected_slowest_extra(own: float, spread: float, world: int) -> float:
    """R5: the expected extra wait for the last of `world` ranks, given this rank's own
    wait `own` and waits uniform on [0, spread] at the other ranks."""
    if world <= 1 or spread <= 0:
        return 0.0
    x = min(max(own / spread, 0.0), 1.0)
    expected = x**world + (world - 1) / world * (1.0 - x**world)
    return spread * max(expected - x, 0.0)


_LAYOUTS: dict[int, tuple[tuple, list[float], list[float], list[float]]] = {}


def _layout(parts: tuple[tuple[float, float], ...]) -> tuple[list[float], list[float], list[float]]:
    """Each kernel's offset in its op, seconds and waves; ops of the same part share one
    tuple of kernels, so this is worked out once per part."""
    found = _LAYOUTS.get(id(parts))
    if found is None or found[0] is not parts:
        offsets, t = [], 0.0
        for seconds, _ in parts:
            offsets.append(t)
            t += seconds
        found = (parts, offsets, [s for s, _ in parts], [max(w, 1.0) for _, w in parts])
        if len(_LAYOUTS) > 4096:
            _LAYOUTS.clear()
        _LAYOUTS[id(parts)] = found
    return found[1], found[2], found[3]


class _ComputeKernels:
    """The compute stream's kernels, in order, as the first pass ran them; kernel i is the
    i-th over the whole stream."""

    def __init__(self, program: list[Op], timeline: Timeline) -> None:
        self.starts: list[float] = []  # each compute op's start, end and time scale
        self.ends: list[float] = []
        self.scales: list[float] = []
        self.first: list[int] = []  # index of each op's first kernel
        self.layouts: list[tuple[list[float], list[float], list[float]]] = []
        count = 0
        for op in program:
            if op.stream != COMPUTE or op.seconds <= 0:
                continue
            parts = op.kernels
            layout = _layout(parts) if parts else ([0.0], [op.seconds], [MANY_WAVES])
            start, end = timeline.start[op.name], timeline.end[op.name]
            self.starts.append(start)
            self.ends.append(end)
            self.scales.append((end - start) / ((layout[0][-1] + layout[1][-1]) or 1.0))
            self.first.append(count)
            self.layouts.append(layout)
            count += len(layout[0])
        self.count = count

    def running_at(self, t: float) -> int | None:
        j = bisect.bisect_right(self.starts, t) - 1
        if j < 0 or t >= self.ends[j]:
            return None
        offsets = self.layouts[j][0]
        k = bisect.bisect_right(offsets, (t - self.starts[j]) / (self.scales[j] or 1.0)) - 1
        return self.first[j] + max(k, 0)

    def kernel(self, i: int) -> tuple[float, float, float]:
        """Start, seconds and waves of kernel i."""
        j = bisect.bisect_right(self.first, i) - 1
        k = i - self.first[j]
        offsets, seconds, waves = self.layouts[j]
        scale = self.scales[j]
        return self.starts[j] + offsets[k] * scale, seconds[k] * scale, waves[k]

    def duration(self, i: int) -> float:
        return self.kernel(i)[1] if 0 <= i < self.count else 0.0


@dataclass
class _Link:
    """What a side kernel or collective met on its way to the SMs, for its successor."""

    at: int | None = None  # the compute kernel it waited behind (equal priority), if any
    first: tuple[float, float] = (0.0, 0.0)  # the chain's first wait and its spread
    races: tuple[float, ...] = ()  # the durations of the races of the later links
    own: float = 0.0  # this rank's expected wait along the chain so far


def hand_out(program: list[Op], timeline: Timeline, rules: HandOut) -> Waits:
    """Each side kernel's and collective's wait for the SMs (R1-R4), and each collective's
    wait for the slowest rank (R5), from the first pass's timeline."""
    waits = Waits()
    if not (rules.give_way or rules.slowest_rank):
        return waits
    kernels = _ComputeKernels(program, timeline)
    links: dict[str, _Link] = {}
    side_chain: dict[str, tuple[str, ...]] = {}
    by_name = {o.name: o for o in program}
    for op in program:
        if op.stream == COMPUTE or op.seconds <= 0:
            continue
        pred = _made_ready_by(op, timeline, by_name)
        link, wait = _meet(op, links.get(pred) if pred else None, kernels, timeline, rules)
        links[op.name] = link
        if rules.give_way and wait > 0:
            waits.give_way[op.name] = wait
        chain = (*side_chain.get(pred, ()), pred) if pred else ()
        side_chain[op.name] = chain
        if op.stream == COMM:
            waits.chain[op.name] = chain
            extra = _slowest_extra(link, rules)
            if rules.slowest_rank and extra > 0:
                waits.slowest_rank[op.name] = extra
    return waits


def _slowest_extra(link: _Link, rules: HandOut) -> float:
    """R5: at the chain's first link only (v3), or at every link (`per_link`)."""
    own, spread = link.first
    if not rules.per_link:
        return expected_slowest_extra(own, spread, rules.world_size)
    p = rules.constants.race_loss_probability
    return expected_chain_extra(link.own, spread, link.races, p, rules.world_size)


def _meet(op: Op, before: _Link | None, kernels: _ComputeKernels, timeline: Timeline,
          rules: HandOut) -> tuple[_Link, float]:  # fmt: skip
    """The op's wait for the SMs, and what it met (R1-R4; R2 for its further launches).
    With `per_link`, a race of equal priority costs this rank its expectation, p x d."""
    c = rules.constants
    higher = rules.priorities.get(op.stream, 0) < rules.priorities.get(COMPUTE, 0)
    collective = op.stream == COMM
    share = c.collective_equal_priority_wait if collective else c.equal_priority_wait
    p = c.race_loss_probability if rules.per_link else 1.0
    link = _Link()
    wait = 0.0
    if before is not None and before.at is not None and not higher:  # R2/R3
        link.at = before.at + 1
        d = kernels.duration(link.at) * share
        wait = p * d
        link.first, link.races, link.own = before.first, (*before.races, d), before.own + wait
    else:
        at = kernels.running_at(timeline.start[op.name])
        if at is not None:
            start, seconds, waves = kernels.kernel(at)
            remaining = start + seconds - timeline.start[op.name]
            if higher:
                n = c.collective_high_priority_wait_waves if collective else (
                    c.high_priority_wait_waves)  # fmt: skip
                wave = seconds / waves
                wait = min(remaining, wave * n)
                link.first = (wait, wave * c.rank_phase_spread)
            else:
                wait = remaining * share
                link.first = (wait, seconds * c.rank_phase_spread)
                link.at = at
            link.own = wait
    for _ in range(max(op.launches, 1) - 1):  # R2: the op's further launches
        if link.at is None:
            break
        link.at += 1
        d = kernels.duration(link.at) * c.equal_priority_wait
        wait += p * d
        link.races, link.own = (*link.races, d), link.own + p * d
    if wait <= 0:
        link.at = None
    return link, wait


def _made_ready_by(op: Op, timeline: Timeline, by_name: dict[str, Op]) -> str | None:
    """The side kernel whose end makes `op` ready, if any (its chain's last link); an
    event recorded on a side stream is no kernel."""
    if not op.waits:
        return None
    latest = max(op.waits, key=lambda w: timeline.end[w])
    made = by_name[latest]
    if (made.stream in SIDE_STREAMS and made.seconds > 0
            and timeline.end[latest] >= timeline.start[op.name] - 1e-12):  # fmt: skip
        return latest
    return None
