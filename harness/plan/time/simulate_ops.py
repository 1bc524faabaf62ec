"""The operations of a program and the timeline the simulator gives them (`simulate.py`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

COMPUTE, COMM, SIDE = "compute", "comm", "side"
# FSDP1's unshard stream: the all-gathers are issued from it, and the backward of the split
# that made a unit's parameter views (the cat of its gradients) runs on it (`programs/fsdp1.py`).
UNSHARD = "unshard"
STREAMS = (COMPUTE, COMM, SIDE, UNSHARD)
# Streams of memory-bound kernels beside compute: they take the give-way rules of side kernels.
SIDE_STREAMS = (SIDE, UNSHARD)


@dataclass(frozen=True, slots=True)
class Op:
    name: str  # unique in its program
    stream: str  # one of STREAMS
    seconds: float  # device time
    term: str  # what its time is, for the breakdown: a model kind, "comm", a mechanism
    waits: tuple[str, ...] = ()  # operations whose completion the stream waits for
    host_waits: tuple[str, ...] = ()  # the host blocks until these have completed
    host_s: float = 0.0  # host time to issue it
    unit: str = ""  # the unit it belongs to, for the explanation
    nbytes: int = 0  # collectives: bytes moved (the unsharded size)
    kind: str = ""  # collectives: all_gather, reduce_scatter, all_reduce
    # compute: the kernels it launches, in order, as (seconds, waves of the SMs)
    kernels: tuple[tuple[float, float], ...] = ()
    launches: int = 1  # side kernels: launches of one op (32-bit indexing splits)


@dataclass
class Timeline:
    start: dict[str, float] = field(default_factory=dict)
    end: dict[str, float] = field(default_factory=dict)
    issued: dict[str, float] = field(default_factory=dict)  # when the host issued it
    total: float = 0.0
    host_blocked_s: float = 0.0  # time the host spent blocked on host_waits
    slowed_s: float = 0.0  # compute time added by overlapping collectives
    give_way: dict[str, float] = field(default_factory=dict)  # waits for the SMs
    slowest_rank: dict[str, float] = field(default_factory=dict)  # waits for other ranks
    chain: dict[str, tuple[str, ...]] = field(default_factory=dict)  # a collective's

    def busy(self, ops: Iterable[Op], streams: tuple[str, ...]) -> float:
        return sum(self.end[o.name] - self.start[o.name] for o in ops if o.stream in streams)
