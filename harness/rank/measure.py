"""A job's measurement of one rank, in phases over a `Session`: build and warm-up (memory
tracked), the timed steps, the reduction across ranks, and a separate profiled pass.

Every phase steps the session through `Run.step`, the same step each time; the timer
encloses only the steps themselves.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import astuple, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from harness.config import JobConfig
from harness.placement import synchronize
from harness.rank.faults import maybe_inject
from harness.rank.host_usage import peak_rss_bytes, reset_peak_rss
from harness.rank.interference import Window, open_gpu_watch
from harness.rank.memory_peaks import (
    check_limit,
    cpu_peak_allocated,
    cuda_memory_outside_allocator,
    restart_cuda_peaks,
)
from harness.rank.session import Session

Report = Callable[[str], None]  # tells the console which phase a rank is in
# On CPU the peak is tracked over the build and this many steps: the second step is the
# first to hold the optimizer state (AdamW makes its moments in the first step's update).
MEMORY_TRACKED_STEPS = 2


@dataclass
class Run:
    """A session stepped as a job steps it, and what its steps left on the device."""

    session: Session
    losses: list[torch.Tensor] = field(default_factory=list)
    grad_norms: list[torch.Tensor] = field(default_factory=list)

    @property
    def steps_run(self) -> int:
        """Steps run so far: the index of the next one."""
        return len(self.losses)

    def step(self, step: int) -> None:
        """One step: a configured fault, the session's step, the memory limit's check."""
        cfg = self.session.cfg
        maybe_inject(cfg.fault, rank=self.session.rank, step=step, device=self.session.device)
        loss, grad_norm = self.session.step(step)
        self.losses.append(loss)
        if grad_norm is not None:
            self.grad_norms.append(grad_norm.detach().to(torch.float64).reshape(()))
        check_limit(cfg.memory_limit_gb, self.session.device)


def log_step(run: Run, step: int, seconds: float, phase: str) -> None:
    """With `verbose=true`, rank 0 logs each step as torchtitan does (`step: 3  loss: ...`),
    into its log, which the console streams. Reading the loss waits for the step's work,
    so the timed steps log after their timer stops."""
    session = run.session
    if not session.cfg.verbose or session.rank != 0 or not run.losses:
        return
    cfg = session.cfg
    loss = float(run.losses[-1].detach().float().item())
    norm = f"  grad_norm: {float(run.grad_norms[-1].item()):7.4f}" if run.grad_norms else ""
    tokens = cfg.micro_batch * cfg.seq_len * cfg.grad_accum
    print(f"step: {step + 1:2}  loss: {loss:7.4f}{norm}  time: {seconds:.3f}s  "
          f"tps: {tokens / seconds:,.0f}  ({phase})", flush=True)  # fmt: skip


@dataclass
class WarmedUp:
    run: Run
    cpu_allocated: int | None  # the build's and first warm-up steps' peak, on CPU
    build_peaks: tuple[int, int] | None  # (allocated, reserved) of the build, on CUDA


def memory_steps(cfg: JobConfig, device: torch.device) -> int:
    """Untimed steps run beyond the warm-up so that the CPU peak sees a whole step with the
    optimizer state: on CPU, as many as a warm-up of one or more falls short of
    MEMORY_TRACKED_STEPS. `warmup_steps=0` asks for no untimed step at all: its peak is
    the build's (`memory_source` says so)."""
    if device.type != "cpu" or cfg.warmup_steps == 0:
        return 0
    return max(0, MEMORY_TRACKED_STEPS - cfg.warmup_steps)


def cpu_memory_source(cfg: JobConfig) -> str:
    """What a CPU job's peak covers: the build and MEMORY_TRACKED_STEPS steps, or with
    `warmup_steps=0` the build alone."""
    source = "profiler-cpu-allocations"
    return source if cfg.warmup_steps else f"{source} (build only: warmup_steps=0)"


def build_and_warm_up(
    cfg: JobConfig, rank: int, world_size: int, device: torch.device, report: Report
) -> WarmedUp:
    """Build the session and run the untimed warm-up steps. The allocator's peak on CPU is
    only knowable from the profiler's allocation events, so the build and the first
    MEMORY_TRACKED_STEPS steps run under memory tracking there, whatever `warmup_steps` is
    (`memory_steps` more untimed steps where warm-up is shorter); on CUDA the build's
    peaks are read apart, and the peaks restart before the timed steps."""
    built: list[Run] = []

    def build() -> Run:
        report("build")
        built.append(Run(Session.build(cfg, rank, world_size, device)))
        return built[0]

    untimed = cfg.warmup_steps + memory_steps(cfg, device)

    def warm_up(run: Run, step: int) -> None:
        report(f"warm-up {step + 1}/{untimed}")
        start = time.perf_counter()
        run.step(step)
        log_step(run, step, time.perf_counter() - start, "warm-up")

    tracked = min(untimed, MEMORY_TRACKED_STEPS)
    cpu_allocated, build_peaks = None, None
    if device.type == "cpu":

        def build_and_track() -> None:
            run = build()
            for s in range(tracked):
                warm_up(run, s)

        _, cpu_allocated = cpu_peak_allocated(build_and_track)
    else:
        build()
        build_peaks = restart_cuda_peaks(device)
        for s in range(tracked):
            warm_up(built[0], s)
    for s in range(tracked, untimed):
        warm_up(built[0], s)
    if device.type == "cuda":  # the timed steps' peaks: not the build's, not warm-up's
        restart_cuda_peaks(device)
    return WarmedUp(built[0], cpu_allocated, build_peaks)


def all_ready(device: torch.device) -> None:
    """Every rank's bookkeeping done (rank 0's phase file, NVML samples, logging) and its
    device idle, before any rank starts its timer: else a rank that finished its own
    bookkeeping first waits for another's inside its timed step's first collective."""
    synchronize(device)
    if dist.is_initialized():
        if device.type == "cuda" and dist.get_backend() == "nccl":
            dist.barrier(device_ids=[device.index or 0])
        else:
            dist.barrier()
    synchronize(device)


@dataclass
class Timed:
    step_times_s: list[float]  # this rank's
    peak_rss: int
    rss_scope: str
    window: Window | None = None  # what else loaded the machine meanwhile


def timed_steps(run: Run, report: Report) -> Timed:
    """The timed steps, each between two device synchronisations, the first after a
    barrier; bookkeeping happens between them, outside the timer. RSS is measured over
    them alone: the memory tracking of warm-up holds every allocation event, hundreds of
    MiB for an engine that allocates per collective."""
    cfg, device = run.session.cfg, run.session.device
    rss_scope = "timed steps" if reset_peak_rss() else "process lifetime"
    step_times: list[float] = []
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", run.session.world_size))
    window = Window.start(open_gpu_watch(device, local_world))
    first = run.steps_run  # warm-up and memory steps before
    for k, s in enumerate(range(first, first + cfg.steps)):
        report(f"timed steps {k + 1}/{cfg.steps}")  # outside the timer
        all_ready(device)
        start = time.perf_counter()
        run.step(s)
        synchronize(device)
        step_times.append(time.perf_counter() - start)
        window.after_step()  # outside the timer
        log_step(run, s, step_times[-1], "timed")
    return Timed(step_times, peak_rss_bytes(), rss_scope, window.stop())


@dataclass(frozen=True, kw_only=True)
class MemoryPeaks:
    """One rank's memory peaks (None: unknown here). Retries and OOMs count the whole job."""

    allocated: int | None
    reserved: int | None
    rss: int | None
    build_allocated: int | None
    build_reserved: int | None
    alloc_retries: int | None
    ooms: int | None
    outside_allocator: int | None

    @classmethod
    def of_rank(cls, warmed: WarmedUp, peak_rss: int) -> MemoryPeaks:
        """Read after the timed steps, when NCCL's communicators and the libraries'
        handles exist."""
        device = warmed.run.session.device
        if device.type != "cuda":
            return cls(allocated=warmed.cpu_allocated, reserved=None, rss=peak_rss,
                       build_allocated=None, build_reserved=None, alloc_retries=None,
                       ooms=None, outside_allocator=None)  # fmt: skip
        stats = torch.cuda.memory_stats(device)
        build = warmed.build_peaks or (None, None)
        return cls(
            allocated=torch.cuda.max_memory_allocated(device),
            reserved=torch.cuda.max_memory_reserved(device),
            rss=peak_rss,
            build_allocated=build[0],
            build_reserved=build[1],
            alloc_retries=stats.get("num_alloc_retries"),
            ooms=stats.get("num_ooms"),
            outside_allocator=cuda_memory_outside_allocator(device),
        )

    def max_across_ranks(self, device: torch.device) -> MemoryPeaks:
        """Each field's largest value over the ranks, in one all-reduce; None stays None
        where no rank knows it."""
        values = [-1 if v is None else v for v in astuple(self)]
        peaks = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
        reduced = (int(v) if v >= 0 else None for v in peaks.tolist())
        return MemoryPeaks(**dict(zip((f.name for f in fields(self)), reduced, strict=True)))


@dataclass
class Reduced:
    """What the job reports of all its ranks."""

    step_times_s: list[float]  # the slowest rank's, step by step
    losses: list[float | None]  # the mean over ranks (typed as result.json holds them)
    grad_norms: list[float | None] | None  # global norms, identical on every rank
    peaks: MemoryPeaks


def reduce_across_ranks(warmed: WarmedUp, timed: Timed) -> Reduced:
    """Reduce once, outside the timed region, and before the profiled pass: no collective
    is then pending while any rank writes its trace."""
    run, device = warmed.run, warmed.run.session.device
    slowest = torch.tensor(timed.step_times_s, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    mean_losses = torch.stack(run.losses).to(torch.float64)
    dist.all_reduce(mean_losses)
    mean_losses /= run.session.world_size
    peaks = MemoryPeaks.of_rank(warmed, timed.peak_rss).max_across_ranks(device)
    grad_norms = torch.stack(run.grad_norms).tolist() if run.grad_norms else None
    return Reduced(slowest.tolist(), mean_losses.tolist(), grad_norms, peaks)


def profiled_pass(run: Run, job_dir: Path, report: Report) -> dict[str, Any] | None:
    """A separate profiled pass after the timed steps; its times never feed the metrics."""
    session = run.session
    cfg = session.cfg
    if cfg.profile.steps <= 0:
        return None
    try:
        from harness.rank.profiling import capture_profile, trace_path
    except ImportError:
        return None
    report("profile")
    next_step = run.steps_run
    counter = iter(range(next_step, next_step + cfg.profile.warmup + cfg.profile.steps))

    def profiled_step(_i: int) -> None:
        run.step(next(counter))
        synchronize(session.device)  # the step's kernels land inside its ProfilerStep window

    capture_profile(
        profiled_step,
        steps=cfg.profile.steps,
        warmup=cfg.profile.warmup,
        out_dir=job_dir,
        rank=session.rank,
        world_size=session.world_size,
        use_cuda=session.device.type == "cuda",
        cuda_sync_events=cfg.profile.cuda_sync_events,
    )
    # Summaries are computed offline from the trace files (harness.results.table), never here:
    # summarising every rank's trace would keep the other ranks waiting in a collective.
    paths = [trace_path(job_dir, r) for r in range(session.world_size)]
    sync_events = session.device.type == "cuda" and cfg.profile.cuda_sync_events
    return {"traces": [str(p.relative_to(job_dir)) for p in paths], "cuda_sync_events": sync_events}


def memory_snapshot_pass(run: Run, job_dir: Path, report: Report) -> Path | None:
    """`memory_snapshot=true`: two more steps with the CUDA allocator's history recorded,
    dumped for pytorch.org/memory_viz (harness.rank.memory_snapshot); never timed."""
    session = run.session
    cfg = session.cfg
    if not cfg.memory_snapshot:
        return None
    from harness.rank.memory_snapshot import STEPS, record_snapshot, snapshot_path

    report("memory snapshot")
    first = run.steps_run
    counter = iter(range(first, first + STEPS))
    return record_snapshot(lambda: run.step(next(counter)), session.device,
                           snapshot_path(job_dir, session.rank))  # fmt: skip
