"""Engines (or one engine on two model implementations) in one 2-rank process group,
stepped in turn, so that load from other processes on a shared machine falls on every run
alike (separate jobs cannot promise that). Each rank uses 1 thread; the same per-rank batch
for every run; the timed step is `harness.rank.train_step.train_step`, the one every job times
(clipping included)."""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import replace

import torch
import torch.distributed as dist

from harness.config import JobConfig
from harness.engines.registry import ENGINES
from harness.rank.memory_peaks import cpu_peak_allocated
from harness.rank.session import Session, wrap_model
from tests.bench.engine_revision import wrap_at
from tests.rank.training import shared_test_engines

# label -> (engine label, model_impl); the engine label may carry `@<git rev>` (that
# revision's yafsdp) or `:<buffer plan>` (yafsdp with `engine.buffer_plan`)
Runs = dict[str, tuple[str, str]]


def interleaved_step_times(
    rank: int,
    world_size: int,
    model: str,
    seq_len: int,
    rounds: int,
    warmup: int,
    dtype: str = JobConfig.dtype,
    revisions: tuple[str, ...] = (),
) -> dict[str, dict[str, float]]:
    """Per engine (and `yafsdp@<rev>` per revision), `interleaved_runs`' figures."""
    labels = [*shared_test_engines(), *(f"yafsdp@{rev}" for rev in revisions)]
    runs = {label: (label, "native") for label in labels}
    return interleaved_runs(rank, world_size, model, seq_len, rounds, warmup, dtype, runs)


def interleaved_runs(
    rank: int,
    world_size: int,
    model: str,
    seq_len: int,
    rounds: int,
    warmup: int,
    dtype: str,
    runs: Runs,
    step_memory: bool = False,
) -> dict[str, dict[str, float]]:
    """Per run: `step_s`, the median step time (slowest rank) over `rounds` rounds of one
    step each, and `other_threads_cpu_s`, the median CPU time a rank's threads other than
    the main one (gloo's) spent in a step (the largest rank's); with step_memory, also
    `step_peak_bytes`, the most a step allocated above what was held before it
    (activations, gathered weights, gradients, transients; the largest rank's), from one
    more step under the profiler's memory tracking."""
    job = JobConfig(model=model, seq_len=seq_len, dtype=dtype)  # else a job's defaults
    sessions = {}
    for label, (engine, impl) in runs.items():
        engine, _, revision = engine.partition("@")
        engine, _, plan = engine.partition(":")
        cfg = replace(job, engine=ENGINES[engine].config(), model_impl=impl)
        if plan:
            cfg.engine.buffer_plan = plan
        wrap = functools.partial(wrap_at, revision) if revision else wrap_model
        sessions[label] = Session.build(cfg, rank, world_size, torch.device("cpu"), wrap=wrap)

    gen = torch.Generator().manual_seed(rank)

    def step(label: str) -> tuple[float, float]:
        """The step's wall time (slowest rank), and the CPU time this rank's other threads
        (gloo's) spent during it (the largest rank's)."""
        session = sessions[label]
        vocab = session.shape.vocab_size
        tokens = torch.randint(0, vocab, (job.micro_batch, seq_len + 1), generator=gen)
        dist.barrier()
        start, cpu, main = time.perf_counter(), time.process_time(), time.thread_time()
        session.step_on(lambda _micro: (tokens[:, :-1], tokens[:, 1:]))
        main = time.thread_time() - main
        measured = torch.tensor([time.perf_counter() - start, time.process_time() - cpu - main])
        dist.all_reduce(measured, op=dist.ReduceOp.MAX)
        return measured[0].item(), measured[1].item()

    times: dict[str, list[tuple[float, float]]] = {label: [] for label in sessions}
    for r in range(warmup + rounds):
        for label in sessions:
            t = step(label)
            if r >= warmup:
                times[label].append(t)
    out = {
        label: {
            "step_s": statistics.median(t for t, _ in ts),
            "other_threads_cpu_s": statistics.median(c for _, c in ts),
        }
        for label, ts in times.items()
    }
    if step_memory:
        for label in sessions:
            _, peak = cpu_peak_allocated(lambda label=label: step(label)[0])
            largest = torch.tensor(float(peak))
            dist.all_reduce(largest, op=dist.ReduceOp.MAX)
            out[label]["step_peak_bytes"] = largest.item()
    return out
