"""`engine.compile_blocks=true`: each transformer block compiled after its checkpoint wrapping
and before sharding, as torchtitan's `apply_compile` does, for every engine.

torchtitan replaces each block by `torch.compile(block)`; an engine that shards afterwards
hangs its hooks on that wrapper, outside the graph (fsdp2, fsdp1, deepspeed, local). yafsdp
keeps its units as they are and gets the block's `forward` compiled instead, so the hooks
it hangs on the block stay out of the graph too. Graphs break where dynamo cannot trace;
breaks are counted (`torch._dynamo.utils.counters`) and recorded, not refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

# Engines whose units are the blocks themselves: compile the forward, keep the module.
FORWARD_ONLY = ("yafsdp",)
CACHE_DIR = "inductor_cache"  # under the sweep's directory: repeats find their kernels


def compile_blocks(layers: nn.ModuleList, engine: str) -> str:
    """Compile every block of `layers` for engine `engine`; how, in words."""
    torch._dynamo.reset()  # this job's counts and compile times alone
    torch._dynamo.utils.counters.clear()
    torch._dynamo.utils.compilation_time_metrics.clear()
    if engine in FORWARD_ONLY:
        for layer in layers:
            layer.forward = torch.compile(layer.forward)
        return "torch.compile(block.forward) per block (the engine's hooks stay out)"
    for i, layer in enumerate(layers):
        layers[i] = torch.compile(layer)  # type: ignore[assignment]
    return "torch.compile(block) per block, then sharded (torchtitan's apply_compile)"


def compile_stats() -> dict[str, Any]:
    """Graph breaks and compile seconds so far in this process (since `compile_blocks`):
    dynamo's forward compiles plus the backward graphs compiled at the first backward."""
    metrics = torch._dynamo.utils.compilation_time_metrics
    seconds = sum(metrics.get("_compile.compile_inner", [])) + sum(
        metrics.get("backward._backward_impl", [])
    )
    breaks = torch._dynamo.utils.counters["graph_break"]
    return {
        "compile_graph_breaks": int(sum(breaks.values())),
        "compile_break_reasons": sorted(breaks)[:5],
        "compile_s": round(seconds, 3),
    }


def use_sweep_cache(job_dir: Path) -> None:
    """Point inductor's cache at `<sweep>/inductor_cache` unless the user chose one."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(job_dir.parent / CACHE_DIR))
