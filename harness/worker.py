"""One rank of one job: build, wrap, warm up, time, profile, and (rank 0) write result.json."""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import asdict, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from harness import metrics
from harness.config import JobConfig
from harness.data import token_batch
from harness.engines.base import RunContext, checkpoint_first_layers, wrap_model
from harness.environment import describe_environment
from harness.faults import maybe_inject
from harness.memory import (
    check_limit,
    cpu_peak_allocated,
    cuda_memory_outside_allocator,
    restart_cuda_peaks,
)
from harness.models.build import build_job_model, decoder_parts, model_settings
from harness.phase import report_phase
from harness.rank_outcome import write_rank_outcome
from harness.result import Result, make_result, write_result
from harness.rss import peak_rss_bytes, reset_peak_rss
from harness.train_step import build_optimizer, optimizer_description, train_step


def run_rank(cfg: JobConfig, job_dir: Path) -> Result | None:
    """Entry point of every rank (RANK/WORLD_SIZE/MASTER_* already in the environment).

    Returns rank 0's result; other ranks return None. Any failure is recorded in
    `<job_dir>/ranks/rank<r>.json` before it propagates, so the launcher can decide the
    job's status from all ranks.
    """
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    device = _pick_device(cfg, local_rank)
    threads = cfg.threads_per_rank or max(1, (os.cpu_count() or 1) // local_world)
    if device.type == "cpu":
        torch.set_num_threads(threads)
    try:
        backend = resolve_backend(cfg.backend, device.type)
        dist.init_process_group(
            backend,
            timeout=timedelta(seconds=cfg.collective_timeout_s),
            # binds NCCL to this rank's GPU at once: barriers and teardown need not guess it
            device_id=device if backend == "nccl" else None,
        )
        result = train(cfg, job_dir, rank, world_size, device, threads)
        write_rank_outcome(job_dir, rank, error=None)
        return result
    except BaseException as e:
        trace = traceback.format_exc()
        write_rank_outcome(job_dir, rank, error=e, trace=trace)
        print(trace, file=sys.stderr, flush=True)  # the rank's log, which the console names
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def resolve_backend(backend: str, device_type: str) -> str:
    """The process-group backend: `auto` is NCCL on CUDA and gloo on CPU."""
    if backend == "auto":
        return "nccl" if device_type == "cuda" else "gloo"
    return backend


def cuda_index(backend: str, local_rank: int, device_count: int) -> int:
    """The GPU of a local rank: shared round robin under gloo, so that every engine can be
    checked with several ranks on one GPU. Under NCCL each rank has its own: the one of its
    local rank where the task sees the node's GPUs, the only one where the cluster binds a
    GPU to each task (SLURM's --gpu-bind, or cgroups: every task sees one device)."""
    if backend == "gloo":
        return local_rank % device_count
    if device_count == 1:
        return 0
    if local_rank >= device_count:
        raise RuntimeError(
            f"local rank {local_rank} has no GPU of its own: this task sees {device_count} "
            "GPUs; give each node as many GPUs as tasks (gpus_per_node) or bind one per task"
        )
    return local_rank


def _pick_device(cfg: JobConfig, local_rank: int) -> torch.device:
    if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()):
        index = cuda_index(cfg.backend, local_rank, torch.cuda.device_count())
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(
    cfg: JobConfig, job_dir: Path, rank: int, world_size: int, device: torch.device, threads: int
) -> Result | None:
    model, shape = build_job_model(cfg.model, cfg.model_impl)  # on meta: no memory yet
    model_impl_settings = model_settings(model)  # before an engine renames its class
    peak_flops, peak_source = _peak_flops(cfg, device)
    ctx = RunContext.of_job(cfg, rank=rank, world_size=world_size, device=device)
    losses: list[torch.Tensor] = []
    grad_norms: list[torch.Tensor] = []
    state: dict[str, Any] = {}
    build_peaks: tuple[int, int] | None = None
    bandwidth = None
    if cfg.probe_bandwidth:
        from harness.bandwidth import probe_bandwidth

        report_phase(job_dir, rank, "bandwidth probe")
        bandwidth = probe_bandwidth(cfg, device)

    def build() -> None:
        report_phase(job_dir, rank, "build")
        # Checkpoint the block, then shard it: one place, the same for every engine.
        checkpoint_first_layers(decoder_parts(model).layers, cfg.ckpt_layers)
        wrapped = wrap_model(model, ctx)
        state["wrapped"] = wrapped
        state["optimizer"] = build_optimizer(wrapped.params, lr=cfg.lr, impl=cfg.adamw_impl)

    def run_step(step: int) -> None:
        maybe_inject(cfg.fault, rank=rank, step=step)

        def batch(micro: int) -> tuple[torch.Tensor, torch.Tensor]:
            return token_batch(
                seed=cfg.seed,
                step=step,
                micro=micro,
                rank=rank,
                micro_batch=cfg.micro_batch,
                seq_len=cfg.seq_len,
                vocab=shape.vocab_size,
                device=device,
            )

        loss, grad_norm = train_step(
            state["wrapped"],
            state["optimizer"],
            batch,
            grad_accum=cfg.grad_accum,
            clip_grad_norm=cfg.clip_grad_norm,
        )
        losses.append(loss)
        if grad_norm is not None:
            grad_norms.append(grad_norm.detach().to(torch.float64).reshape(()))
        check_limit(cfg.memory_limit_gb, device)

    def warm_up(step: int) -> None:
        report_phase(job_dir, rank, f"warm-up {step + 1}/{cfg.warmup_steps}")
        run_step(step)

    # The allocator's peak on CPU is only knowable from the profiler's allocation events,
    # so the build and the untimed warm-up steps run under memory tracking there.
    memory_steps = min(cfg.warmup_steps, 2)
    if device.type == "cpu":

        def build_and_warm_up() -> None:
            build()
            for s in range(memory_steps):
                warm_up(s)

        _, peak_allocated = cpu_peak_allocated(build_and_warm_up)
    else:
        build()
        build_peaks = restart_cuda_peaks(device)
        for s in range(memory_steps):
            warm_up(s)
        peak_allocated = None
    for s in range(memory_steps, cfg.warmup_steps):
        warm_up(s)
    if device.type == "cuda":  # the timed steps' peaks: not the build's, not warm-up's
        restart_cuda_peaks(device)

    # RSS is measured over the timed steps alone: the memory tracking above holds every
    # allocation event, hundreds of MiB for an engine that allocates per collective.
    rss_scope = "timed steps" if reset_peak_rss() else "process lifetime"
    step_times: list[float] = []
    for k, s in enumerate(range(cfg.warmup_steps, cfg.warmup_steps + cfg.steps)):
        report_phase(job_dir, rank, f"timed steps {k + 1}/{cfg.steps}")  # outside the timer
        _synchronize(device)
        start = time.perf_counter()
        run_step(s)
        _synchronize(device)
        step_times.append(time.perf_counter() - start)
    peak_rss = peak_rss_bytes()

    # Reduce across ranks once, outside the timed region, and before the profiled pass:
    # no collective is then pending while any rank writes its trace.
    slowest = torch.tensor(step_times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    mean_losses = torch.stack(losses).to(torch.float64)
    dist.all_reduce(mean_losses)
    mean_losses /= world_size
    peaks = _peaks(device, peak_allocated, peak_rss, build_peaks)
    dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
    loss_steps = list(range(len(losses)))
    # Global norms, identical on every rank, so rank 0's are the job's.
    step_grad_norms = torch.stack(grad_norms).tolist() if grad_norms else None

    profile = _capture_profile(cfg, job_dir, rank, world_size, device, run_step)
    if rank != 0:
        return None

    step_times_s = slowest.tolist()
    summary = metrics.step_time_summary(step_times_s)
    tokens_per_step = cfg.micro_batch * cfg.grad_accum * cfg.seq_len
    flops_per_token = shape.flops_per_token(cfg.seq_len)
    allocated, reserved, rss, build_allocated, build_reserved, retries, ooms, outside = (
        int(v) if v >= 0 else None for v in peaks.tolist()
    )
    result_metrics = {
        "step_times_s": step_times_s,
        **summary,
        **metrics.throughput(
            iteration_time_s=summary["iteration_time_s"],
            tokens_per_step_per_device=tokens_per_step,
            flops_per_token=flops_per_token,
            peak_flops_per_device=peak_flops,
        ),
        "flops_per_token": flops_per_token,
        "peak_flops_per_device": peak_flops,
        "peak_flops_source": peak_source,
        "peak_memory_allocated_bytes": allocated,
        "peak_memory_reserved_bytes": reserved,
        "peak_rss_bytes": rss,
        "peak_rss_scope": rss_scope,
        "build_peak_memory_allocated_bytes": build_allocated,
        "build_peak_memory_reserved_bytes": build_reserved,
        "num_alloc_retries": retries,
        "num_ooms": ooms,
        "device_memory_outside_allocator_bytes": outside,
        "memory_source": "cuda-allocator" if device.type == "cuda" else "profiler-cpu-allocations",
        "memory_breakdown": state["wrapped"].memory_breakdown(state["optimizer"]),
        "losses": mean_losses.tolist(),
        "loss_steps": loss_steps,
        "grad_norms": step_grad_norms,
        "bandwidth": bandwidth,
        "predicted": _predicted(cfg, device),
    }
    env = describe_environment(device=device, world_size=world_size, threads_per_rank=threads)
    result = make_result(
        status="ok",
        config=asdict(cfg),
        env=env,
        metrics=result_metrics,
        profile=profile,
        engine_settings=engine_settings(cfg, {**model_impl_settings, **state["wrapped"].settings}),
    )
    write_result(job_dir, result)
    return result


def _predicted(cfg: JobConfig, device: torch.device) -> dict[str, Any] | None:
    """The planner's row for this job, kept beside what it measured (the report's
    predicted columns); None where the planner cannot tell."""
    try:
        from harness.plan.planner import plan_row

        ran = replace(cfg, device=device.type, backend=resolve_backend(cfg.backend, device.type))
        row = plan_row(ran).to_dict()
    except Exception as e:  # a prediction must never cost a measurement
        return {"error": f"{type(e).__name__}: {e}"}
    keep = ("peak_memory_bytes", "memory_bytes_by_class", "fits", "iteration_time_s",
            "compute_s", "exposed_comm_s", "other_s", "stall_s", "comm_s",
            "tokens_per_s_per_device", "mfu", "breakdown", "mechanisms", "waits")  # fmt: skip
    return {k: row[k] for k in keep}


def engine_settings(cfg: JobConfig, own: dict[str, Any]) -> dict[str, Any]:
    """The engine's effective settings plus those every engine shares, flat."""
    return {
        "engine": cfg.engine.name,
        **own,
        "clip_grad_norm": cfg.clip_grad_norm,
        "optimizer": optimizer_description(cfg.adamw_impl),
        "ckpt_layers": cfg.ckpt_layers,
        "ckpt_wrapping": "checkpoint_wrapper(block, NO_REENTRANT) inside the sharded unit",
        "grad_accum": cfg.grad_accum,
    }


def _peak_flops(cfg: JobConfig, device: torch.device) -> tuple[float | None, str]:
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return metrics.spec_peak_flops(name), f"spec sheet bf16 dense ({name})"
    # The CPU's best dense matmul rate: in the job's dtype, or in fp32 where that is faster
    # (CPUs without native bf16 run torch's bf16 matmul tens of times slower than fp32).
    rates = {d: metrics.measure_matmul_peak_flops(d) for d in dict.fromkeys([cfg.dtype, "fp32"])}
    best = max(rates, key=rates.__getitem__)
    return rates[best], f"measured {best} matmul on CPU (best of {', '.join(rates)})"


def _peaks(
    device: torch.device, cpu_allocated: int | None, rss: int, build: tuple[int, int] | None
) -> torch.Tensor:
    """[allocated, reserved, rss, build allocated, build reserved, allocator retries, OOMs,
    device memory outside the allocator] of this rank; -1 where unknown. Retries and OOMs
    count the whole job. Called after the timed steps, when NCCL's communicators and the
    libraries' handles exist."""
    if device.type == "cuda":
        stats = torch.cuda.memory_stats(device)
        outside = cuda_memory_outside_allocator(device)
        values = [torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)]
        values += [rss, *(build or (-1, -1)), stats.get("num_alloc_retries", -1)]
        values += [stats.get("num_ooms", -1), -1 if outside is None else outside]
    else:
        values = [cpu_allocated if cpu_allocated is not None else -1, -1, rss, -1, -1, -1, -1, -1]
    return torch.tensor(values, dtype=torch.float64, device=device)


def _capture_profile(cfg, job_dir, rank, world_size, device, run_step) -> dict[str, Any] | None:
    """A separate profiled pass after the timed steps; its times never feed the metrics."""
    if cfg.profile.steps <= 0:
        return None
    try:
        from harness.profiling import capture_profile, trace_path
    except ImportError:
        return None
    report_phase(job_dir, rank, "profile")
    next_step = cfg.warmup_steps + cfg.steps
    counter = iter(range(next_step, next_step + cfg.profile.warmup + cfg.profile.steps))

    def profiled_step(_i: int) -> None:
        run_step(next(counter))
        _synchronize(device)  # the step's kernels land inside its ProfilerStep window

    capture_profile(
        profiled_step,
        steps=cfg.profile.steps,
        warmup=cfg.profile.warmup,
        out_dir=job_dir,
        rank=rank,
        world_size=world_size,
        use_cuda=device.type == "cuda",
    )
    # Summaries are computed offline from the trace files (harness.results), never here:
    # summarising every rank's trace would keep the other ranks waiting in a collective.
    paths = [trace_path(job_dir, r) for r in range(world_size)]
    return {"traces": [str(p.relative_to(job_dir)) for p in paths]}
