"""All engines in one 2-rank process group, stepped in turn, so that load from other
processes on a shared machine falls on every engine alike (separate jobs cannot promise
that). Each rank uses 1 thread; the same per-rank batch for every engine; the timed step is
`harness.train_step.train_step`, the one every job times (clipping included)."""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from harness.config import JobConfig
from harness.engines.base import DTYPES, RunContext, checkpoint_first_layers
from harness.engines.registry import ENGINES, get_engine
from harness.models.llama import build_model
from harness.train_step import build_optimizer, train_step


def interleaved_step_times(
    rank: int,
    world_size: int,
    model: str,
    seq_len: int,
    rounds: int,
    warmup: int,
    dtype: str = JobConfig.dtype,
) -> dict[str, float]:
    """Median step time (slowest rank) per engine over `rounds` rounds of one step each."""
    job = JobConfig(model=model, seq_len=seq_len, dtype=dtype)  # else a job's defaults
    vocab = build_model(model).shape.vocab_size
    runs = {}
    for label, spec in ENGINES.items():
        ctx = RunContext(
            rank=rank,
            world_size=world_size,
            device=torch.device("cpu"),
            param_dtype=DTYPES[job.dtype],
            reduce_dtype=DTYPES[spec.config().reduce_dtype],
            ckpt_layers=job.ckpt_layers,
            grad_accum=job.grad_accum,
            seed=job.seed,
            cfg=spec.config(),
        )
        module = build_model(model)
        checkpoint_first_layers(module.layers, job.ckpt_layers)
        wrapped = get_engine(spec.name).wrap(module, ctx)
        runs[label] = (wrapped, build_optimizer(wrapped.params, lr=job.lr, impl=job.adamw_impl))

    gen = torch.Generator().manual_seed(rank)

    def step(label: str) -> float:
        wrapped, opt = runs[label]
        tokens = torch.randint(0, vocab, (job.micro_batch, seq_len + 1), generator=gen)
        dist.barrier()
        start = time.perf_counter()
        train_step(
            wrapped,
            opt,
            lambda _micro: (tokens[:, :-1], tokens[:, 1:]),
            grad_accum=job.grad_accum,
            clip_grad_norm=job.clip_grad_norm,
        )
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
