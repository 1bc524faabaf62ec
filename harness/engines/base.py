"""The door every engine comes through: wrap a model for N ranks, hand back what to train.

A new engine is a module with a class that has `name` and `wrap(model, ctx) -> Wrapped`,
registered in `harness/engines/registry.py`; `harness.rank.session.wrap_model` calls it. The
model arrives on the meta device, its first `ckpt_layers` blocks already wrapped for
activation checkpointing (the same for every engine: checkpoint the block, then shard it);
the engine materialises (its share of) it and initialises it from
`harness.models.init_weights` so every engine starts from the same weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from harness.config import ADAMW_IMPLS, EngineConfig


@dataclass(kw_only=True)
class RunContext:
    """What an engine needs of a job on one rank (`harness.rank.session.engine_context`)."""

    rank: int
    world_size: int
    device: torch.device
    param_dtype: torch.dtype
    reduce_dtype: torch.dtype
    ckpt_layers: int
    grad_accum: int
    seed: int
    cfg: EngineConfig
    # yafsdp: the memory budget for its buffer plan (`YaFSDP(memory_budget_bytes=...)`)
    memory_budget_bytes: int | None = None
    # For an engine that builds its own optimizer and step (deepspeed): the job's lr,
    # AdamW implementation and clip (0: off).
    lr: float = 3e-4
    adamw_impl: str = "fused"
    clip_grad_norm: float = 1.0


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.bfloat16` -> `bfloat16`, as engine settings name dtypes."""
    return str(dtype).removeprefix("torch.")


def no_breakdown(optimizer: torch.optim.Optimizer) -> None:
    return None


@dataclass(kw_only=True)
class Wrapped:
    """What the training loop drives. Hooks default to doing nothing.

    The loop, per optimizer step (`harness.rank.train_step`):
        for i in range(grad_accum):
            before_micro_batch(i); (loss * loss_scale).backward()
        after_backward(); clip_grad_norm_(max_norm) if clipping
        optimizer.step(); optimizer.zero_grad(); after_step()
    `clip_grad_norm_` returns the global gradient norm before clipping (every rank alike).
    `loss_scale` lets an engine that divides once at the end (yafsdp: by P x accumulation)
    and one that averages over ranks per reduction (FSDP: loss_scale = 1 / grad_accum)
    produce the same gradients.

    An engine that owns its optimizer step (DeepSpeed) sets `backward` (called with the
    scaled loss in place of `.backward()`), `step` (in place of clipping, the optimizer
    step, zero_grad and `after_step`; returns the norm before clipping, None when clipping
    is off) and `optimizer` (its own, which the Session keeps in place of building one).
    """

    module: nn.Module
    params: Iterable[torch.Tensor]  # what the optimizer steps (parameters or fp32 masters)
    clip_grad_norm_: Callable[[float], torch.Tensor]
    loss_scale: float = 1.0
    before_micro_batch: Callable[[int], None] = lambda micro_idx: None
    after_backward: Callable[[], None] = lambda: None
    after_step: Callable[[], None] = lambda: None
    # Bytes this rank holds by class (weights, grads, master, staging, optimizer), given the
    # optimizer built on `params`; None where the engine cannot tell.
    memory_breakdown: Callable[[torch.optim.Optimizer], dict[str, int] | None] = no_breakdown
    # The engine's effective settings (result.json `engine_settings`): flat name -> value.
    settings: dict[str, Any] = field(default_factory=dict)
    backward: Callable[[torch.Tensor], None] | None = None
    step: Callable[[], torch.Tensor | None] | None = None
    optimizer: torch.optim.Optimizer | None = None
    # The model inside an engine's own wrapper module (DeepSpeed's engine), where its
    # buffers are put back by name; None: `module` is the model.
    unwrapped: nn.Module | None = None


class Engine(Protocol):
    name: str

    def wrap(self, model: nn.Module, ctx: RunContext) -> Wrapped: ...


def checkpoint_first_layers(layers: nn.ModuleList, n: int) -> None:
    """Wrap the first n transformer blocks with non-reentrant activation checkpointing.

    Called once, before any engine shards the model, so every engine gets the same
    structure: sharding outside, checkpointing inside (FSDP(checkpoint(block))), as
    accelerate and torchtitan apply it.
    """
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        checkpoint_wrapper,
    )

    for i in range(n):
        layers[i] = checkpoint_wrapper(layers[i], checkpoint_impl=CheckpointImpl.NO_REENTRANT)


def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Clip by the global L2 norm as torchtitan does (plain tensors or DTensor shards): one
    foreach norm, reduced across ranks for DTensors; returns the norm before clipping."""
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, foreach=True)
    if hasattr(total, "full_tensor"):  # a DTensor partial norm: reduce it across the mesh
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total, foreach=True)
    return total


def canonical_module_name(name: str) -> str:
    """A module's name in the unwrapped model (no checkpoint/FSDP wrapper segments)."""
    from harness.models.init_weights import canonical_name

    return canonical_name(name + ".").rstrip(".")


# The optimizer every engine steps with; an engine that owns its step (DeepSpeed) builds it
# here too, so that no engine reaches into the rank's loop for it.
def build_optimizer(params: Iterable[torch.Tensor], *, lr: float, impl: str) -> torch.optim.AdamW:
    """AdamW with the implementation `impl` (fused, foreach or for-loop), for every engine."""
    if impl not in ADAMW_IMPLS:
        raise ValueError(f"adamw_impl={impl!r} is unknown; choose one of: {', '.join(ADAMW_IMPLS)}")
    return torch.optim.AdamW(
        params, lr=lr, weight_decay=0.0, fused=impl == "fused", foreach=impl == "foreach"
    )


def optimizer_description(impl: str) -> str:
    return f"torch.optim.AdamW({impl}, weight_decay=0)"
