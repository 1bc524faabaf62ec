"""A step as the GPU runs it: one host thread issuing work onto streams, in program order.

A program is the list of operations an engine's step issues, in the order its host thread
issues them. Each runs on one stream (the compute stream, the communication stream every
collective of the process group shares, or a side stream for memory-bound work beside
compute), after whatever events it waits for; the host spends `host_s` issuing it and may
block until earlier operations have finished (a synchronisation, FSDP1's rate limiter). A
stream runs its operations one after another in issue order. So communication that a
gather issued ahead can hide behind compute, and what a stream waits for is exposed, as on
a GPU.

While a collective runs, NCCL's kernels hold some of the GPU's SMs: compute that overlaps
one runs slower by `overlap_slowdown` for the overlapped part. Memory-bound kernels on a
side stream share the SMs and memory bandwidth of the compute they overlap (one
refinement pass prices both).
"""

from __future__ import annotations

import bisect

from harness.plan.time.handout import HandOut, hand_out
from harness.plan.time.simulate_ops import (
    COMM,
    COMPUTE,
    SIDE,
    SIDE_STREAMS,
    STREAMS,
    UNSHARD,
    Op,
    Timeline,
)

__all__ = ["COMM", "COMPUTE", "SIDE", "SIDE_STREAMS", "STREAMS", "UNSHARD", "HandOut", "Op",
           "Timeline", "simulate"]  # fmt: skip


def _run(
    program: list[Op], seconds: dict[str, float], delay: dict[str, float] | None = None
) -> Timeline:
    t = Timeline()
    host = 0.0
    free = dict.fromkeys(STREAMS, 0.0)
    for op in program:
        if op.host_waits:
            ready = max(t.end[w] for w in op.host_waits)
            if ready > host:
                t.host_blocked_s += ready - host
                host = ready
        host += op.host_s
        t.issued[op.name] = host
        start = max([host, free[op.stream], *(t.end[w] for w in op.waits)])
        if delay:
            start += delay.get(op.name, 0.0)
        end = start + seconds[op.name]
        t.start[op.name], t.end[op.name] = start, end
        free[op.stream] = end
    t.total = max([host, *free.values()])
    return t


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted intervals of two streams, merged so that none overlaps another."""
    merged: list[tuple[float, float]] = []
    for a, b in intervals:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _overlap(
    intervals: list[tuple[float, float]], lo: float, hi: float, ends: list[float] | None = None
) -> float:
    """Length of [lo, hi) covered by the (sorted, disjoint) intervals; `ends`, their ends
    in order, lets the search start at the first interval that ends after `lo`."""
    covered = 0.0
    first = bisect.bisect_right(ends, lo) if ends is not None else 0
    for i in range(first, len(intervals)):
        a, b = intervals[i]
        if b <= lo:
            continue
        if a >= hi:
            break
        covered += min(b, hi) - max(a, lo)
    return covered


def simulate(
    program: list[Op],
    *,
    overlap_slowdown: float = 0.0,
    side_sharing: bool = False,
    hand_out_rules: HandOut | None = None,
) -> Timeline:
    """Run the program. Then, where compute-stream work overlaps a collective, it takes
    `overlap_slowdown` longer for the overlapped part (NCCL's SMs); with `side_sharing`,
    it also takes as long again as the side-stream kernels it overlaps (they share its SMs
    and memory bandwidth: together they take as long as one after the other); with
    `hand_out_rules`, each side kernel and collective starts later by its wait for the SMs
    and for the slowest rank (`handout.py`); and the program runs again with those
    durations and waits (one refinement pass)."""
    names = [op.name for op in program]
    if len(set(names)) != len(names):
        raise ValueError("operation names must be unique within a program")
    seconds = {op.name: op.seconds for op in program}
    timeline = _run(program, seconds)
    if overlap_slowdown <= 0 and not side_sharing and hand_out_rules is None:
        return timeline
    slowed, added = _slowed(program, timeline, seconds, overlap_slowdown, side_sharing)
    delay: dict[str, float] = {}
    waits = None
    if hand_out_rules is not None:
        waits = hand_out(program, timeline, hand_out_rules)
        for table in (waits.give_way, waits.slowest_rank):
            for name, wait in table.items():
                delay[name] = delay.get(name, 0.0) + wait
    timeline = _run(program, slowed, delay)
    timeline.slowed_s = added
    if waits is not None:
        timeline.give_way, timeline.slowest_rank = waits.give_way, waits.slowest_rank
        timeline.chain = waits.chain
    return timeline


def _slowed(
    program: list[Op], timeline: Timeline, seconds: dict[str, float], overlap_slowdown: float,
    side_sharing: bool,
) -> tuple[dict[str, float], float]:  # fmt: skip
    """Each compute op's duration with the collectives and side kernels it overlaps."""

    def busy(*streams: str) -> list[tuple[float, float]]:
        return sorted((timeline.start[o.name], timeline.end[o.name]) for o in program
                      if o.stream in streams and o.seconds > 0)  # fmt: skip

    comm = busy(COMM) if overlap_slowdown > 0 else []
    side = _merged(busy(*SIDE_STREAMS)) if side_sharing else []
    comm_ends, side_ends = [b for _, b in comm], [b for _, b in side]
    slowed = dict(seconds)
    added = 0.0
    for op in program:
        if op.stream != COMPUTE or op.seconds <= 0:
            continue
        lo, hi = timeline.start[op.name], timeline.end[op.name]
        extra = (_overlap(comm, lo, hi, comm_ends) * overlap_slowdown
                 + _overlap(side, lo, hi, side_ends))  # fmt: skip
        slowed[op.name] += extra
        added += extra
    return slowed, added
