"""One rank's training: the job's model built, its first layers checkpointed, wrapped by
its engine with its buffers kept, and its optimizer; then stepped as every job steps.

The only place a model meets an engine: the worker, the GPU checks, the planner's
accuracy tests and the benchmarks all build through `Session.build`, so what they measure
is what a job runs. `Session.step` is `harness.rank.train_step.train_step` on the job's data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from harness.config import JobConfig
from harness.dtypes import DTYPES
from harness.engines.adapters import get_engine
from harness.engines.base import RunContext, Wrapped, build_optimizer, checkpoint_first_layers
from harness.models.build import (
    build_job_model,
    decoder_parts,
    model_settings,
    restore_buffers,
    snapshot_buffers,
)
from harness.models.shapes import ModelShape
from harness.placement import placed
from harness.plan.planner import yafsdp_memory_budget
from harness.rank import train_step as steps
from harness.rank.data import token_batch

Batch = steps.Batch
Wrap = Callable[[nn.Module, RunContext], Wrapped]


def wrap_model(model: nn.Module, ctx: RunContext) -> Wrapped:
    """Wrap `model` (on meta) with the engine `ctx.cfg.name`, its buffers kept.

    Engines materialise parameters from `harness.models.init_weights`; buffers (HF's rotary
    `inv_freq`) are computed by the model's constructor, so their values are taken before
    and put back after, whatever the engine's materialisation did to them.
    """
    buffers = snapshot_buffers(model)
    wrapped = get_engine(ctx.cfg.name).wrap(model, ctx)
    restore_buffers(wrapped.unwrapped or wrapped.module, buffers, ctx.device)
    return wrapped


def engine_context(
    cfg: JobConfig,
    rank: int,
    world_size: int,
    device: torch.device,
    *,
    planned_budget: bool = True,
) -> RunContext:
    """What an engine needs of a job's config on one rank. yafsdp's memory budget is the
    planner's for the job as it runs on `device` (none with `planned_budget=False`)."""
    budget = None
    if planned_budget and cfg.engine.name == "yafsdp":
        budget = yafsdp_memory_budget(placed(cfg, device), device)
    return RunContext(
        rank=rank,
        world_size=world_size,
        device=device,
        param_dtype=DTYPES[cfg.dtype],
        reduce_dtype=DTYPES[cfg.engine.reduce_dtype],
        ckpt_layers=cfg.ckpt_layers,
        grad_accum=cfg.grad_accum,
        seed=cfg.seed,
        cfg=cfg.engine,
        memory_budget_bytes=budget,
        lr=cfg.lr,
        adamw_impl=cfg.adamw_impl,
        clip_grad_norm=cfg.clip_grad_norm,
    )


@dataclass(kw_only=True)
class Session:
    """One rank's wrapped model and optimizer, and the job that shapes its steps."""

    cfg: JobConfig
    rank: int
    world_size: int
    device: torch.device
    shape: ModelShape
    ctx: RunContext
    wrapped: Wrapped
    optimizer: torch.optim.Optimizer
    model_settings: dict[str, str]
    compiled: str | None = None  # how the blocks were compiled; None: not compiled

    @classmethod
    def build(
        cls,
        cfg: JobConfig,
        rank: int,
        world_size: int,
        device: torch.device,
        *,
        shape: ModelShape | None = None,
        planned_budget: bool = True,
        wrap: Wrap = wrap_model,
    ) -> Session:
        """Build `cfg`'s model on meta and let its engine materialise this rank's share.

        `shape`: a native model of these shapes in place of `cfg.model` (the GPU checks'
        shapes no preset names). `planned_budget=False` gives yafsdp no memory budget
        (its smallest buffer plan) where the planner's is not wanted. `wrap`: another way
        to wrap (another revision's engine), called as `wrap_model` is.
        """
        model, model_shape = build_job_model(shape or cfg.model, cfg.model_impl)
        own_settings = model_settings(model)  # before an engine renames its class
        # Checkpoint the block, then shard it: one place, the same for every engine.
        checkpoint_first_layers(decoder_parts(model).layers, cfg.ckpt_layers)
        compiled = None
        if cfg.engine.compile_blocks:  # after checkpointing, before sharding
            from harness.engines.compile_blocks import compile_blocks

            compiled = compile_blocks(decoder_parts(model).layers, cfg.engine.name)
        ctx = engine_context(cfg, rank, world_size, device, planned_budget=planned_budget)
        wrapped = wrap(model, ctx)
        optimizer = wrapped.optimizer
        if optimizer is None:  # an engine that owns its step brings its own
            optimizer = build_optimizer(wrapped.params, lr=cfg.lr, impl=cfg.adamw_impl)
        return cls(
            cfg=cfg,
            rank=rank,
            world_size=world_size,
            device=device,
            shape=model_shape,
            ctx=ctx,
            wrapped=wrapped,
            optimizer=optimizer,
            model_settings=own_settings,
            compiled=compiled,
        )

    def batch(self, step: int, micro: int) -> Batch:
        """Micro-batch `micro` of step `step` on this rank, drawn on the device."""
        return token_batch(
            seed=self.cfg.seed,
            step=step,
            micro=micro,
            rank=self.rank,
            micro_batch=self.cfg.micro_batch,
            seq_len=self.cfg.seq_len,
            vocab=self.shape.vocab_size,
            device=self.device,
        )

    def batches(self, step: int) -> list[Batch]:
        """Every micro-batch of step `step`, made at once (before a region that must not
        include drawing them)."""
        return [self.batch(step, micro) for micro in range(self.cfg.grad_accum)]

    def forward_backward(self, batch: Callable[[int], Batch]) -> torch.Tensor:
        """Every micro-batch's forward and backward and the engine's reduction; the step's
        mean loss, still on the device."""
        return steps.forward_backward(self.wrapped, batch, grad_accum=self.cfg.grad_accum)

    def optimizer_step(self) -> torch.Tensor | None:
        """Clip, step the optimizer and the engine; the norm before clipping (None: off)."""
        return steps.clip_and_step(
            self.wrapped, self.optimizer, clip_grad_norm=self.cfg.clip_grad_norm
        )

    def step(self, step: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One optimizer step on step `step`'s data, exactly the step every job times: its
        mean loss and gradient norm (None when clipping is off), both on the device."""
        return self.step_on(lambda micro: self.batch(step, micro))

    def step_on(self, batch: Callable[[int], Batch]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The job's step on other data (`batch(micro)`), as `step` returns it."""
        return steps.train_step(
            self.wrapped,
            self.optimizer,
            batch,
            grad_accum=self.cfg.grad_accum,
            clip_grad_norm=self.cfg.clip_grad_norm,
        )

    @property
    def settings(self) -> dict[str, Any]:
        """The model's implementation and the engine's effective settings, flat; with
        compiled blocks, how, and the graph breaks and compile time of the steps so far."""
        settings = {**self.model_settings, **self.wrapped.settings}
        if self.compiled is not None:
            from harness.engines.compile_blocks import compile_stats

            settings |= {"compile_blocks": self.compiled, **compile_stats()}
        return settings
