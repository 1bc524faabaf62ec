"""The pieces every suite shares: a job's `Session` built on one rank from a check's
shapes, and the bytes a rank's parameters, gradients and optimizer state occupy.

A check steps the session as a job does (`Session.step`), or in its parts
(`Session.forward_backward`, `Session.optimizer_step`) to run code between them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable

import torch

from harness.config import EngineConfig, JobConfig
from harness.engines.registry import ENGINES
from harness.models.shapes import ModelShape
from harness.rank.session import Session


def engine_config(label: str) -> EngineConfig:
    """The engine named as tables name it (fsdp2_tuned is fsdp2 with async unshard)."""
    return ENGINES[label].config()


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
    buffer_plan: str = "auto",
) -> Session:
    """A job of engine `label` on a native model of `shape` (every check trains with a
    job's learning rate, optimizer and clipping), built on this rank. yafsdp gets no
    memory budget: the checks' shapes are not the planner's presets."""
    cfg = JobConfig(
        model=shape.name, engine=engine_config(label), gpus=world_size, dtype=dtype,
        ckpt_layers=ckpt_layers, grad_accum=grad_accum, seq_len=seq_len, seed=seed,
    )  # fmt: skip
    cfg.engine.buffer_plan = buffer_plan  # yafsdp's; the other engines keep "auto"
    return Session.build(cfg, rank, world_size, device, shape=shape, planned_budget=False)


def train_step(t: Session, step: int) -> torch.Tensor:
    """The job's step `step`; its mean loss, still on the device."""
    return t.step(step)[0]


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
