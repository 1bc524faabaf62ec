"""The pieces every suite shares: an engine built on one rank, one training step, and the
bytes a rank's parameters, gradients and optimizer state occupy.

The step is the worker's (same data, loss and hook order), kept here so that a check can
run code between steps or around forward and backward.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from harness import train_step as step_parts
from harness.config import EngineConfig, JobConfig
from harness.data import token_batch
from harness.engines.base import DTYPES, RunContext, Wrapped, checkpoint_first_layers
from harness.engines.registry import ENGINES, get_engine
from harness.models.llama import build_model
from harness.models.shapes import ModelShape

# Every check trains as a job does: its learning rate, optimizer and clipping.
JOB_DEFAULTS = JobConfig()
LR = JOB_DEFAULTS.lr


def engine_config(label: str) -> EngineConfig:
    """The engine named as tables name it (fsdp2_tuned is fsdp2 with async unshard)."""
    return ENGINES[label].config()


@dataclass
class Trainee:
    """One rank's wrapped model and optimizer, and how its steps are shaped."""

    wrapped: Wrapped
    optimizer: torch.optim.Optimizer
    shape: ModelShape
    device: torch.device
    rank: int
    seq_len: int
    grad_accum: int = 1
    micro_batch: int = 1
    seed: int = 0


def build(
    label: str,
    shape: ModelShape,
    *,
    rank: int,
    world_size: int,
    device: torch.device,
    dtype: str = "bf16",
    ckpt_layers: int = 0,
    grad_accum: int = 1,
    seq_len: int = 128,
    seed: int = 0,
) -> Trainee:
    """Build the model on meta and let the engine adapter materialise its share."""
    cfg = engine_config(label)
    ctx = RunContext(
        rank=rank,
        world_size=world_size,
        device=device,
        param_dtype=DTYPES[dtype],
        reduce_dtype=DTYPES[cfg.reduce_dtype],
        ckpt_layers=ckpt_layers,
        grad_accum=grad_accum,
        seed=seed,
        cfg=cfg,
    )
    model = build_model(shape, device="meta")
    checkpoint_first_layers(model.layers, ckpt_layers)  # as every job does, before sharding
    wrapped = get_engine(cfg.name).wrap(model, ctx)
    optimizer = step_parts.build_optimizer(wrapped.params, lr=LR, impl=JOB_DEFAULTS.adamw_impl)
    return Trainee(
        wrapped, optimizer, shape, device, rank, seq_len, grad_accum=grad_accum, seed=seed
    )


def batches(t: Trainee, step: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The step's micro-batches, already on the device (made before any timed region)."""
    return [
        token_batch(
            seed=t.seed,
            step=step,
            micro=m,
            rank=t.rank,
            micro_batch=t.micro_batch,
            seq_len=t.seq_len,
            vocab=t.shape.vocab_size,
            device=t.device,
        )
        for m in range(t.grad_accum)
    ]


def forward_backward(t: Trainee, data: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Every micro-batch's forward and backward; the step's mean loss (not synchronised)."""
    return step_parts.forward_backward(t.wrapped, lambda m: data[m], grad_accum=t.grad_accum)


def optimizer_step(t: Trainee) -> None:
    step_parts.clip_and_step(t.wrapped, t.optimizer, clip_grad_norm=JOB_DEFAULTS.clip_grad_norm)


def train_step(t: Trainee, step: int) -> torch.Tensor:
    loss = forward_backward(t, batches(t, step))
    optimizer_step(t)
    return loss


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if type(t).__name__ == "DTensor" else t  # type: ignore[attr-defined]


def _storage_total(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the distinct storages behind `tensors` (views of one buffer count once)."""
    seen: dict[tuple[str, int], int] = {}
    for x in tensors:
        if x is None:
            continue
        s = _local(x).untyped_storage()
        if s.nbytes():
            seen[(str(x.device), s.data_ptr())] = s.nbytes()
    return sum(seen.values())


def storage_bytes(
    params: Iterable[torch.Tensor], optimizer: torch.optim.Optimizer
) -> dict[str, int]:
    """Bytes by class held behind the optimizer's parameters: the parameters, their
    gradients and the AdamW moments (the per-parameter step counters are left out)."""
    params = list(params)
    moments = [
        optimizer.state[p][k]
        for p in params
        for k in ("exp_avg", "exp_avg_sq")
        if k in optimizer.state.get(p, {})
    ]
    return {
        "params": _storage_total(params),
        "grads": _storage_total(p.grad for p in params),
        "optimizer": _storage_total(moments),
    }


def release_cuda_memory() -> None:
    """Free what the checks before left on the GPU. An engine is a reference cycle (its unit
    modules' hooks hold its schedule), freed only by the cycle collector: without it, the
    next check's peak would start above the previous check's model."""
    gc.collect()
    torch.cuda.empty_cache()
