"""Deliberate failures, so tests can prove that a failing job becomes a result row.

`fault.kind=delay`: one rank sleeps `fault.ms` inside a named engine range, once a step
(on CUDA its device does: `torch.cuda._sleep` on the current stream, for the cycles the
device's measured clock spins in `fault.ms`; a host sleep would be absorbed while the host
runs ahead, or land in another range).

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


def maybe_inject(fault: FaultConfig, *, rank: int, step: int, device: Any = None) -> None:
    arm_delay(fault, rank=rank, step=step, device=device)
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
    """Whether range `name` is one of `where`'s: itself, a unit's ('yafsdp.forward.layers.3')
    or a module's ('FSDP::all_gather (layers.0)')."""
    return name == where or name.startswith((where + ".", where + " ("))


class _Delay:
    """The armed state of this process's delay; `prepare` and `arm` are called at every
    step's start."""

    def __init__(self) -> None:
        self.fault: FaultConfig | None = None
        self.armed = False
        self.prepared = False
        self.cycles_per_s: float | None = None  # on CUDA: the device's sleep clock

    def prepare(self, fault: FaultConfig, device: Any) -> None:
        """Once, at the first step (a warm-up one): on CUDA, measure the device's clock."""
        if self.prepared:
            return
        self.prepared = True
        if device is not None and getattr(device, "type", "") == "cuda":
            self.cycles_per_s = cycles_per_second(device)

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
            if self.cycles_per_s is None:
                time.sleep(fault.ms / 1e3)
            else:  # on CUDA the host runs ahead: the device's stream must wait, in the range
                import torch

                torch.cuda._sleep(int(fault.ms / 1e3 * self.cycles_per_s))


_DELAY = _Delay()


def _wrap_record_function(delay: _Delay) -> None:
    from torch.autograd.profiler import record_function

    enter = record_function.__enter__

    def entered(self: Any) -> Any:
        out = enter(self)
        delay.maybe_sleep(self.name, record_function)
        return out

    record_function.__enter__ = entered  # type: ignore[method-assign]


def arm_delay(fault: FaultConfig, *, rank: int, step: int, device: Any = None) -> None:
    """At the start of `step`: let the next range `fault.where` on this rank sleep (on a
    CUDA `device`, its current stream)."""
    if fault.kind != "delay" or rank != fault.rank:
        return
    _DELAY.prepare(fault, device)
    if step >= fault.step:
        _DELAY.arm(fault)


# What `torch.cuda._sleep(cycles)` spins per second on a GPU: its cycles are the SM clock's,
# which differs between cards and with their clocks, so a delay of a given time on the
# device is measured, not assumed (the GPU check's stress suite uses it too).
CALIBRATION_CYCLES = 50_000_000  # tens of milliseconds at any current clock


def cycles_per_second(device: Any) -> float:
    """Spin `CALIBRATION_CYCLES` between two CUDA events on `device`'s current stream."""
    import torch

    with torch.cuda.device(device):
        torch.cuda._sleep(CALIBRATION_CYCLES // 10)  # wake the clocks
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(CALIBRATION_CYCLES)
        end.record()
        torch.cuda.synchronize(device)
    return CALIBRATION_CYCLES / (start.elapsed_time(end) / 1e3)
