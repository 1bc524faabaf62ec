"""One rank of one job: build, warm up, time, profile (`harness.rank.measure` over a
`harness.rank.session.Session`), and (rank 0) write result.json."""

from __future__ import annotations

import sys
import traceback
from dataclasses import asdict, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from harness.config import JobConfig
from harness.engines.base import optimizer_description
from harness.jobdir.phase import report_phase
from harness.jobdir.rank_outcome import write_rank_outcome
from harness.jobdir.result import Metrics, Profile, Result, typed_fields, write_result
from harness.placement import Placement
from harness.rank import measure, metrics
from harness.rank.environment import describe_environment
from harness.rank.interference import reduce_interference
from harness.rank.session import Session


def run_rank(cfg: JobConfig, job_dir: Path) -> Result | None:
    """Entry point of every rank (RANK/WORLD_SIZE/MASTER_* already in the environment).

    Returns rank 0's result; other ranks return None. Any failure is recorded in
    `<job_dir>/ranks/rank<r>.json` before it propagates, so the launcher can decide the
    job's status from all ranks.
    """
    place = Placement.of_rank(cfg)
    try:
        dist.init_process_group(
            place.backend,
            timeout=timedelta(seconds=cfg.collective_timeout_s),
            # binds NCCL to this rank's GPU at once: barriers and teardown need not guess it
            device_id=place.device if place.backend == "nccl" else None,
        )
        result = train(cfg, job_dir, place)
        write_rank_outcome(job_dir, place.rank, error=None)
        return result
    except BaseException as e:
        trace = traceback.format_exc()
        write_rank_outcome(job_dir, place.rank, error=e, trace=trace)
        print(trace, file=sys.stderr, flush=True)  # the rank's log, which the console names
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def train(cfg: JobConfig, job_dir: Path, place: Placement) -> Result | None:
    """Measure the job on this rank; rank 0 writes and returns its result."""
    rank, device = place.rank, place.device

    def report(phase: str) -> None:
        report_phase(job_dir, rank, phase)

    if cfg.engine.compile_blocks:
        from harness.engines.compile_blocks import use_sweep_cache

        use_sweep_cache(job_dir)
    peak_flops = _peak_flops(cfg, device)
    bandwidth = None
    if cfg.probe_bandwidth:
        from harness.bandwidth import probe_bandwidth

        report("bandwidth probe")
        bandwidth = probe_bandwidth(cfg, device)
    warmed = measure.build_and_warm_up(cfg, rank, place.world_size, device, report)
    timed = measure.timed_steps(warmed.run, report)
    reduced = measure.reduce_across_ranks(warmed, timed)
    interference = None
    if timed.window is not None:  # a collective, before the profiled pass (as the above)
        interference = reduce_interference(timed.window, device, place.local_rank)
    profile = measure.profiled_pass(warmed.run, job_dir, report)
    measure.memory_snapshot_pass(warmed.run, job_dir, report)
    if rank != 0:
        return None
    session = warmed.run.session
    job_metrics = _metrics(cfg, session, reduced, timed.rss_scope, peak_flops)
    # the prediction is the job's own record (prediction.json, written before the ranks)
    job_metrics = replace(job_metrics, bandwidth=bandwidth, interference=interference)
    result = Result(
        status="ok",
        config=asdict(cfg),
        env=describe_environment(
            device=device, world_size=place.world_size, threads_per_rank=place.threads
        ),
        # every metric is written, those unknown here as null
        metrics=replace(job_metrics, nulls=_unset(job_metrics)),
        profile=None if profile is None else Profile.from_dict(profile),
        engine_settings=engine_settings(cfg, session.settings),
    )
    write_result(job_dir, result)
    return result


def _metrics(
    cfg: JobConfig,
    session: Session,
    reduced: measure.Reduced,
    rss_scope: str,
    peak_flops: tuple[float | None, str],
) -> Metrics:
    """The job's metrics, by keyword: a name Metrics does not have is a TypeError."""
    summary = metrics.step_time_summary(reduced.step_times_s)
    flops_per_token = session.shape.flops_per_token(cfg.seq_len)
    rates = metrics.throughput(
        iteration_time_s=summary["iteration_time_s"],
        tokens_per_step_per_device=cfg.micro_batch * cfg.grad_accum * cfg.seq_len,
        flops_per_token=flops_per_token,
        peak_flops_per_device=peak_flops[0],
    )
    peaks, cuda = reduced.peaks, session.device.type == "cuda"
    return Metrics(
        step_times_s=reduced.step_times_s,
        iteration_time_s=summary["iteration_time_s"],
        iteration_time_p10_s=summary["iteration_time_p10_s"],
        iteration_time_p90_s=summary["iteration_time_p90_s"],
        tokens_per_s_per_device=rates["tokens_per_s_per_device"],
        tflops_per_device=rates["tflops_per_device"],
        mfu=rates["mfu"],
        flops_per_token=flops_per_token,
        peak_flops_per_device=peak_flops[0],
        peak_flops_source=peak_flops[1],
        peak_memory_allocated_bytes=peaks.allocated,
        peak_memory_reserved_bytes=peaks.reserved,
        peak_rss_bytes=peaks.rss,
        peak_rss_scope=rss_scope,
        build_peak_memory_allocated_bytes=peaks.build_allocated,
        build_peak_memory_reserved_bytes=peaks.build_reserved,
        num_alloc_retries=peaks.alloc_retries,
        num_ooms=peaks.ooms,
        device_memory_outside_allocator_bytes=peaks.outside_allocator,
        memory_source="cuda-allocator" if cuda else measure.cpu_memory_source(cfg),
        memory_breakdown=session.wrapped.memory_breakdown(session.optimizer),
        losses=reduced.losses,
        loss_steps=list(range(len(reduced.losses))),
        grad_norms=reduced.grad_norms,
    )


def _unset(record: Metrics) -> frozenset[str]:
    return frozenset(f.name for f in typed_fields(Metrics) if getattr(record, f.name) is None)


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
