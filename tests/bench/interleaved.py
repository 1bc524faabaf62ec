"""All engines in one 2-rank process group, stepped in turn, so that load from other
processes on a shared machine falls on every engine alike (separate jobs cannot promise
that). Each rank uses 1 thread; the same per-rank batch for every engine."""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from harness.config import EngineConfig
from harness.engines import RunContext, get_engine
from harness.models.llama import build_model

ENGINES = {
    "yafsdp": EngineConfig(name="yafsdp", label="yafsdp"),
    "fsdp2": EngineConfig(name="fsdp2", label="fsdp2"),
    "fsdp2_tuned": EngineConfig(name="fsdp2", label="fsdp2_tuned", async_unshard=True),
    "fsdp1": EngineConfig(name="fsdp1", label="fsdp1"),
    "local": EngineConfig(name="local", label="local"),
}


def interleaved_step_times(
    rank: int, world_size: int, model: str, seq_len: int, rounds: int, warmup: int
) -> dict[str, float]:
    """Median step time (slowest rank) per engine over `rounds` rounds of one step each."""
    vocab = build_model(model).shape.vocab_size
    runs = {}
    for label, cfg in ENGINES.items():
        ctx = RunContext(
            rank=rank,
            world_size=world_size,
            device=torch.device("cpu"),
            param_dtype=torch.bfloat16,
            reduce_dtype=torch.float32,
            ckpt_layers=0,
            grad_accum=1,
            seed=0,
            cfg=cfg,
        )
        wrapped = get_engine(cfg.name).wrap(build_model(model), ctx)
        runs[label] = (wrapped, torch.optim.AdamW(wrapped.params, lr=1e-4, weight_decay=0.0))

    gen = torch.Generator().manual_seed(rank)

    def step(label: str) -> float:
        wrapped, opt = runs[label]
        tokens = torch.randint(0, vocab, (1, seq_len + 1), generator=gen)
        dist.barrier()
        start = time.perf_counter()
        logits = wrapped.module(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        (loss * wrapped.loss_scale).backward()
        wrapped.after_backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        wrapped.after_step()
        elapsed = torch.tensor(time.perf_counter() - start)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        return elapsed.item()

    times: dict[str, list[float]] = {label: [] for label in runs}
    for r in range(warmup + rounds):
        for label in runs:
            t = step(label)
            if r >= warmup:
                times[label].append(t)
    return {label: statistics.median(ts) for label, ts in times.items()}
