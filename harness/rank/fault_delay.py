"""`fault.kind=delay`: one rank sleeps `fault.ms` inside a named engine range, once a step
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
and only in a rank whose config asks for it. The table of ranges is torch-free, so the
pre-flight check can list the choices.
"""

from __future__ import annotations

import time
from typing import Any

from harness.config import FaultConfig

DELAY_RANGE = "fault.delay"

# Per adapter (EngineConfig.name): the ranges a delay may sit in, as the engine names them.
DELAY_HOOKS: dict[str, tuple[str, ...]] = {
    "yafsdp": (
        "yafsdp.all_gather",
        "yafsdp.reduce_scatter",
        "yafsdp.all_reduce",
        "yafsdp.forward",
        "yafsdp.backward",
    ),
    "fsdp1": (
        "FullyShardedDataParallel._pre_forward",
        "FullyShardedDataParallel._post_forward",
        "FullyShardedDataParallel._pre_backward_hook",
        "FullyShardedDataParallel._post_backward_hook",
    ),
    "fsdp2": (
        "FSDP::all_gather",
        "FSDP::pre_forward",
        "FSDP::post_forward",
        "FSDP::pre_backward",
        "FSDP::post_backward_reduce",
    ),
}


def delay_errors(fault: FaultConfig, engine: str) -> list[str]:
    """What is wrong with a delay fault for `engine`, each naming the field and the fix."""
    if fault.kind != "delay":
        if fault.where or fault.ms:
            return [
                f"fault.where and fault.ms are read by fault.kind=delay only, not "
                f"fault.kind={fault.kind}; drop them, or set fault.kind=delay"
            ]
        return []
    errors = []
    hooks = DELAY_HOOKS.get(engine, ())
    if not hooks:
        errors.append(
            f"fault.kind=delay needs an engine with named ranges ({', '.join(DELAY_HOOKS)}), "
            f"not engine.name={engine}"
        )
    elif fault.where not in hooks:
        errors.append(
            f"fault.where={fault.where!r} is not a range of engine.name={engine}; choose one "
            f"of: {', '.join(hooks)}"
        )
    if not fault.ms > 0:
        errors.append(f"fault.ms={fault.ms} must be more than 0 milliseconds")
    return errors


def in_range(name: str, where: str) -> bool:
    """Whether range `name` is one of `where`'s: itself, a unit's ('yafsdp.forward.unit3')
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
            from harness.rank import cuda_clock

            self.cycles_per_s = cuda_clock.cycles_per_second(device)

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
