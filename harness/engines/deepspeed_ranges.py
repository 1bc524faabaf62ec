"""Profiler ranges around DeepSpeed ZeRO-3's fetches, releases and gradient reduces.

DeepSpeed emits no range into torch.profiler on CPU (its `instrument_w_nvtx` is NVTX
only), so the overlap and unit tables would see its gloo collectives with no unit. The
names follow `harness.trace.engine_annotations.deepspeed`: `DeepSpeed::<kind> (<unit>)`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.engines.base import canonical_module_name

PREFIX = "DeepSpeed::"
REDUCE = "_DeepSpeedZeroOptimizer_Stage3__reduce_and_partition_ipg_grads"


def range_name(kind: str, unit: str) -> str:
    return f"{PREFIX}{kind} ({unit})"


def add_profiler_ranges(engine: Any, model: nn.Module) -> None:
    """Wrap this engine's fetch/release (its parameter coordinator) and its bucket reduce
    (its ZeRO-3 optimizer) in ranges; only this engine's instances are touched."""
    names = {id(m): canonical_module_name(n) or "<root>" for n, m in model.named_modules()}
    owner = {id(p): names[id(m)] for m in model.modules() for p in m.parameters(recurse=False)}
    optimizer = engine.optimizer
    coordinator = optimizer.parameter_offload.get_param_coordinator()
    for kind, method in (("fetch", "fetch_sub_module"), ("release", "release_sub_module")):
        setattr(coordinator, method, _ranged_module_call(kind, getattr(coordinator, method), names))
    reduce = getattr(optimizer, REDUCE)

    @functools.wraps(reduce)
    def ranged_reduce(communication_data_type: torch.dtype) -> None:
        params = optimizer.ipg_buckets[communication_data_type].params
        if not params:
            return reduce(communication_data_type)
        units = list(dict.fromkeys(owner.get(id(p), "?") for p in params))
        unit = units[0] if len(units) == 1 else f"{units[0]}..{units[-1]}"
        with torch.profiler.record_function(range_name("reduce", unit)):
            return reduce(communication_data_type)

    setattr(optimizer, REDUCE, ranged_reduce)


def _ranged_module_call(
    kind: str, call: Callable[..., None], names: dict[int, str]
) -> Callable[..., None]:
    @functools.wraps(call)
    def ranged(module: nn.Module, *args: Any, **kwargs: Any) -> None:
        with torch.profiler.record_function(range_name(kind, names.get(id(module), "?"))):
            call(module, *args, **kwargs)

    return ranged
