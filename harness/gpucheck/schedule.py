"""The order of the suites, what each one's work is expected to cost on one GPU, and the
run's deadline (no torch).

The default order puts the most valuable checks first: A (the engine on real streams),
B (every engine's numerics on CUDA), D and S (the planner's one-GPU measurements), then C,
which is elastic: it gets whatever time the deadline leaves. The default deadline fits a
run in one 10-minute command, with room for the wheels' install and process start.

An estimate is counted from the suite's work (builds, steps, jobs) times the seconds each
unit is assumed to take on an H100/H200: assumptions written here, not measurements; the
report holds what each suite really took (`seconds` in its meta).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

ORDER = ("A", "B", "D", "S", "C")
ELASTIC = "C"
DEFAULT_DEADLINE_S = 540.0
# Assumed seconds per unit of work on one H100/H200 (not measured: see the module's note).
UNIT_SECONDS: Mapping[str, float] = {
    "process group": 10.0,  # CUDA context and NCCL communicator of a one-rank group
    "small build": 5.0,  # llama_mini built and three steps run
    "probe build": 20.0,  # the 7B-layer probe model built
    "probe step": 1.0,  # one step of the probe model, profiled or timed
    "job": 30.0,  # one job of suite B: its ranks start, import torch, train 3 steps
    "probe kernel set": 30.0,  # suite D: one model's backward GEMMs with side kernels
}


@dataclass(frozen=True)
class Work:
    """A suite's work in units (`UNIT_SECONDS`'s keys), and its estimate."""

    units: dict[str, int]

    @property
    def seconds(self) -> float:
        return sum(UNIT_SECONDS[unit] * n for unit, n in self.units.items())

    def describe(self) -> str:
        parts = ", ".join(f"{n} x {unit}" for unit, n in self.units.items() if n)
        return f"~{self.seconds / 60:.1f} GPU min ({parts or 'nothing to run'})"


def order(asked: list[str] | None) -> list[str]:
    """The suites to run, in the order asked (each once); the default order without."""
    if not asked:
        return list(ORDER)
    return list(dict.fromkeys(asked))


@dataclass
class Deadline:
    """The run's wall-clock deadline, from its start."""

    seconds: float
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def passed(self) -> bool:
        return self.left() <= 0
