"""A YaFSDP-style sharded data-parallel engine: preallocated buffers, ordered collectives.

The public names are below; the modules that hold them are private (`_api`, `_layout`,
...), as in FSDP2's `_fully_shard/`. Beside the engine itself (`YaFSDP`), a planner that
predicts the engine's memory and collectives uses its layout, buffer plan, buffers and
schedule on the meta device, and a bandwidth probe uses its collectives.

The names are imported on first use, so that the torch-free module of the package
(`yafsdp_impl.annotation_names`, the profiler ranges' names) imports where torch is not.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from yafsdp_impl._api import YaFSDP, byte_classes, held_bytes
    from yafsdp_impl._buffers import Buffers
    from yafsdp_impl._collectives import all_gather, has_native_reduce_scatter, reduce_scatter
    from yafsdp_impl._layout import Layout, build_layout, is_norm
    from yafsdp_impl._plan import BufferPlan, PlanChoice, plan_buffers, splits_vocab
    from yafsdp_impl._schedule import Schedule
    from yafsdp_impl._vocab_split import split_unit_names, split_vocab_units

__all__ = [
    "BufferPlan",
    "Buffers",
    "Layout",
    "PlanChoice",
    "Schedule",
    "YaFSDP",
    "all_gather",
    "build_layout",
    "byte_classes",
    "has_native_reduce_scatter",
    "held_bytes",
    "is_norm",
    "plan_buffers",
    "reduce_scatter",
    "split_unit_names",
    "split_vocab_units",
    "splits_vocab",
]

_HOMES = {
    # the engine and its memory report
    "YaFSDP": "_api",
    "byte_classes": "_api",
    "held_bytes": "_api",
    # which parameter lives where
    "Layout": "_layout",
    "build_layout": "_layout",
    "is_norm": "_layout",
    # the buffer plan and the tensors it sizes
    "BufferPlan": "_plan",
    "PlanChoice": "_plan",
    "plan_buffers": "_plan",
    "splits_vocab": "_plan",
    "Buffers": "_buffers",
    # the split_vocab plan's units: the ends cut into vocabulary halves
    "split_unit_names": "_vocab_split",
    "split_vocab_units": "_vocab_split",
    # which collective runs when
    "Schedule": "_schedule",
    # the collectives, for a bandwidth probe
    "all_gather": "_collectives",
    "reduce_scatter": "_collectives",
    "has_native_reduce_scatter": "_collectives",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
