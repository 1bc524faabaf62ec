"""Measured CPU peak allocated bytes of every engine, each case built and stepped as a job
builds and warms up (model, engine, optimizer, two steps), in one process group."""

from __future__ import annotations

import gc
from typing import Any

import torch

from harness.config import JobConfig
from harness.data import token_batch
from harness.engines.base import RunContext, checkpoint_first_layers
from harness.engines.registry import ENGINES, get_engine
from harness.memory import cpu_peak_allocated, frees_counted_on_every_thread
from harness.models.llama import build_model
from harness.models.shapes import get_shape
from harness.train_step import build_optimizer, train_step

STEPS = 2  # the job's memory-tracked warm-up steps: the second holds the AdamW state


def peak_of(cfg: JobConfig, rank: int, world_size: int) -> int:
    shape = get_shape(cfg.model)
    device = torch.device("cpu")
    ctx = RunContext.of_job(cfg, rank=rank, world_size=world_size, device=device)

    def run() -> None:
        model = build_model(shape, device="meta")
        checkpoint_first_layers(model.layers, cfg.ckpt_layers)
        wrapped = get_engine(cfg.engine.name).wrap(model, ctx)
        optimizer = build_optimizer(wrapped.params, lr=cfg.lr, impl=cfg.adamw_impl)
        for step in range(STEPS):

            def batch(micro: int, step: int = step) -> tuple[torch.Tensor, torch.Tensor]:
                return token_batch(
                    seed=cfg.seed, step=step, micro=micro, rank=rank,
                    micro_batch=cfg.micro_batch, seq_len=cfg.seq_len,
                    vocab=shape.vocab_size, device=device,
                )  # fmt: skip

            train_step(wrapped, optimizer, batch, grad_accum=cfg.grad_accum, clip_grad_norm=1.0)
        del model, wrapped, optimizer
        gc.collect()  # while tracked: the next case then starts from this one's baseline

    # What earlier cases left alive, read from one small allocation.
    start = cpu_peak_allocated(lambda: torch.empty(1))[1] - 4
    _, peak = cpu_peak_allocated(run)
    return peak - start


def measure(rank: int, world_size: int, cases: list[dict[str, Any]]) -> list[int]:
    """Peak allocated bytes of this rank for each case (model, seq_len, ckpt_layers, engine)."""
    peaks = []
    # Held across cases, so a block one case allocates and gloo frees later still leaves
    # the tally before the next case reads its baseline.
    with frees_counted_on_every_thread() as exact:
        assert exact, "this torch's libc10 does not export the CPU allocator's tally flag"
        for case in cases:
            engine = ENGINES[case["engine"]].config()
            cfg = JobConfig(
                model=case["model"], seq_len=case["seq_len"], ckpt_layers=case["ckpt_layers"],
                engine=engine, gpus=world_size, dtype="fp32", device="cpu",
            )  # fmt: skip
            peaks.append(peak_of(cfg, rank, world_size))
    return peaks
