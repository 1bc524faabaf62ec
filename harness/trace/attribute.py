"""A step, attributed: each rank's profiled step split into named causes that add up to it.

The sweep itself lands in the next change; this fixes the public shape others build on.
No torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class StepAttribution:
    """One rank's profiled step: `causes` (cause name from harness.trace.causes -> seconds)
    sums to `step_s`; `by_unit` splits a cause by the engine unit it belongs to, where known."""

    rank: int
    step: int
    start_us: float  # the step window's start, in the trace's own microseconds
    step_s: float
    causes: dict[str, float]
    by_unit: dict[str, dict[str, float]] = field(default_factory=dict)


def attribute_trace(path: Path | str) -> list[StepAttribution]:
    """Every profiled step of one trace file, attributed."""
    raise NotImplementedError("the attribution sweep is not written yet")


def attribute_job(job_dir: Path | str) -> list[StepAttribution]:
    """Every rank's trace of a job directory (traces/rank<r>.json[.gz]), attributed."""
    raise NotImplementedError("the attribution sweep is not written yet")
