"""The door every engine comes through: wrap a model for N ranks, hand back what to train.

A new engine is a module with a class that has `name` and `wrap(model, ctx) -> Wrapped`,
registered in `harness/engines/__init__.py`. The model arrives on the meta device; the
engine materialises (its share of) it and calls `init_weights` so every engine starts from
the same weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from harness.config import EngineConfig

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass(kw_only=True)
class RunContext:
    rank: int
    world_size: int
    device: torch.device
    param_dtype: torch.dtype
    reduce_dtype: torch.dtype
    ckpt_layers: int
    grad_accum: int
    seed: int
    cfg: EngineConfig


def no_breakdown(optimizer: torch.optim.Optimizer) -> None:
    return None


@dataclass(kw_only=True)
class Wrapped:
    """What the training loop drives. Hooks default to doing nothing.

    The loop, per optimizer step:
        for i in range(grad_accum):
            before_micro_batch(i); (loss * loss_scale).backward()
        after_backward(); optimizer.step(); optimizer.zero_grad(); after_step()
    `loss_scale` lets an engine that divides once at the end (yafsdp: by P x accumulation)
    and one that averages over ranks per reduction (FSDP: loss_scale = 1 / grad_accum)
    produce the same gradients.
    """

    module: nn.Module
    params: Iterable[nn.Parameter]
    clip_grad_norm_: Callable[[float], torch.Tensor]
    loss_scale: float = 1.0
    before_micro_batch: Callable[[int], None] = lambda micro_idx: None
    after_backward: Callable[[], None] = lambda: None
    after_step: Callable[[], None] = lambda: None
    # Bytes this rank holds by class (weights, grads, master, staging, optimizer), given the
    # optimizer built on `params`; None where the engine cannot tell.
    memory_breakdown: Callable[[torch.optim.Optimizer], dict[str, int] | None] = no_breakdown


class Engine(Protocol):
    name: str

    def wrap(self, model: nn.Module, ctx: RunContext) -> Wrapped: ...


def checkpoint_first_layers(layers: nn.ModuleList, n: int) -> None:
    """Wrap the first n transformer layers with non-reentrant activation checkpointing."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        checkpoint_wrapper,
    )

    for i in range(n):
        layers[i] = checkpoint_wrapper(layers[i], checkpoint_impl=CheckpointImpl.NO_REENTRANT)
