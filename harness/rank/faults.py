"""Deliberate failures, so tests can prove that a failing job becomes a result row.

`fault.kind=delay`: one rank sleeps `fault.ms` inside a named engine range, once a step.

`fault.where` names an engine's profiler range without its unit: the issue of a collective
(`yafsdp.reduce_scatter`, `FSDP::all_gather`) or a hook (`yafsdp.forward`,
`FullyShardedDataParallel._post_backward_hook`). From step `fault.step` on, the first such
range the chosen rank enters in a step sleeps there, inside a range of its own
(`DELAY_RANGE`), so the trace shows exactly how long the delay took. It lets a matched pair
of jobs, with and without it, prove that the trace attribution puts a known delay under
the right cause.

The ranges are the engines' `record_function`s; the delay wraps that class's `__enter__`,
and only in a rank whose config asks for it. Which ranges each engine offers is
`harness.validate.ranges.DELAY_HOOKS` (torch-free, so the pre-flight check lists them).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from harness.config import FaultConfig

DELAY_RANGE = "fault.delay"


class InjectedCrash(RuntimeError):
    """A rank's deliberate crash (`fault.kind=crash`, `drill=crash`)."""


def maybe_inject(fault: FaultConfig, *, rank: int, step: int) -> None:
    arm_delay(fault, rank=rank, step=step)
    if fault.kind == "none" or rank != fault.rank or step != fault.step:
        return
    if fault.kind == "crash":
        raise InjectedCrash(f"injected crash: rank {rank} crashed at step {step}")
    if fault.kind == "hang":
        while True:  # the collective timeout or the job wall-clock limit must end this
            time.sleep(1.0)
    if fault.kind == "kill":  # dies the way the OOM killer or `kill -9` ends a rank
        os.kill(os.getpid(), signal.SIGKILL)
    if fault.kind == "oom":
        raise MemoryError(f"injected fault: rank {rank} ran out of memory at step {step}")


def in_range(name: str, where: str) -> bool:
    """Whether range `name` is one of `where`'s: itself, a unit's ('yafsdp.forward.unit3')
    or a module's ('FSDP::all_gather (layers.0)')."""
    return name == where or name.startswith((where + ".", where + " ("))


class _Delay:
    """The armed state of this process's delay; `arm` is called at every step's start."""

    def __init__(self) -> None:
        self.fault: FaultConfig | None = None
        self.armed = False

    def arm(self, fault: FaultConfig) -> None:
        if self.fault is None:
            self.fault = fault
            _wrap_record_function(self)
        self.armed = True

    def maybe_sleep(self, name: str, record_function: Any) -> None:
        fault = self.fault
        if not self.armed or fault is None or not in_range(name, fault.where):
            return
        self.armed = False  # once a step
        with record_function(DELAY_RANGE):
            time.sleep(fault.ms / 1e3)


_DELAY = _Delay()


def _wrap_record_function(delay: _Delay) -> None:
    from torch.autograd.profiler import record_function

    enter = record_function.__enter__

    def entered(self: Any) -> Any:
        out = enter(self)
        delay.maybe_sleep(self.name, record_function)
        return out

    record_function.__enter__ = entered  # type: ignore[method-assign]


def arm_delay(fault: FaultConfig, *, rank: int, step: int) -> None:
    """At the start of `step`: let the next range `fault.where` on this rank sleep."""
    if fault.kind == "delay" and rank == fault.rank and step >= fault.step:
        _DELAY.arm(fault)
