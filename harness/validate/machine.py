"""What this machine can run, for a job launched here: its GPUs, cores and memory.

Checked only where the job's ranks start on this machine (the local launcher, a dry run
of it); a SLURM job's ranks run elsewhere, and the submitter passes no machine. A dry run
is checked like the run it stands for.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from harness.config import JobConfig
from harness.placement import no_gpu_known_without_torch

# A CPU rank holds at least this much: the smallest peak RSS of a rank in the committed
# CPU demo (reports/cpu_demo/results.csv, llama_tiny: 380 MiB); larger models hold more.
CPU_RANK_BYTES = 380 * 2**20
# Past this many ranks per core each rank gets a sliver of a core: the step times then
# measure the scheduler, not the engine, and gloo's peers wait on ranks that are not running.
RANKS_PER_CORE = 4
GIB = 2**30
ELSEWHERE = "hydra/launcher=slurm with hardware=cpu to spread the ranks over nodes"


@dataclass(frozen=True)
class Machine:
    """The machine a local launch runs on; a field left None is not known, not checked."""

    gpus: int | None = None
    cores: int | None = None
    memory_bytes: int | None = None


def this_machine(cfg: JobConfig) -> Machine:
    """This machine. GPUs are counted (importing torch) only where the job may use them."""
    try:
        cores = len(os.sched_getaffinity(0))  # what this process may run on
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    try:
        memory: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        memory = None
    return Machine(gpus=_gpus(cfg), cores=cores, memory_bytes=memory)


def _gpus(cfg: JobConfig) -> int | None:
    if cfg.device == "cpu":
        return None
    if no_gpu_known_without_torch():
        return 0  # torch would count none
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.device_count()


def _device(cfg: JobConfig, machine: Machine) -> str:
    """`cfg.device`, with `auto` resolved where this machine's GPUs were counted."""
    if cfg.device == "auto" and machine.gpus is not None:
        return "cuda" if machine.gpus else "cpu"
    return cfg.device


def runs_on_cpu(cfg: JobConfig, machine: Machine | None) -> bool:
    """Whether the job's ranks would be this machine's CPU processes."""
    return machine is not None and _device(cfg, machine) == "cpu"


def machine_errors(cfg: JobConfig, machine: Machine | None) -> list[str]:
    if machine is None:
        return []
    device = _device(cfg, machine)
    if device == "cuda" and machine.gpus is not None:
        return _gpu_errors(cfg, machine.gpus)
    if device == "cpu":
        return _cpu_errors(cfg, machine)
    return []


def _gpu_errors(cfg: JobConfig, gpus: int) -> list[str]:
    if gpus == 0:
        return [
            f"device={cfg.device} asks for GPUs, but this machine has none; use hardware=cpu "
            "(or device=cpu) here, or run on a GPU machine or with hydra/launcher=slurm"
        ]
    # gloo may put several ranks on one GPU (rank -> local_rank % GPUs); NCCL cannot
    if cfg.gpus > gpus and cfg.backend != "gloo":
        return [
            f"gpus={cfg.gpus} is more than the {gpus} GPUs on this machine, and NCCL "
            f"needs one GPU per rank; use gpus<={gpus} here, backend=gloo to share "
            "GPUs (correctness checks), or hydra/launcher=slurm for more"
        ]
    return []


def _cpu_errors(cfg: JobConfig, machine: Machine) -> list[str]:
    errors = []
    if cfg.backend == "nccl":
        errors.append(
            "backend=nccl needs CUDA GPUs, and this machine has none, so the ranks run on its "
            "CPUs; use backend=gloo (or auto) here, or run on a GPU machine or with "
            "hydra/launcher=slurm"
        )
    cores = machine.cores
    if cores and cfg.threads_per_rank > cores:
        errors.append(
            f"threads_per_rank={cfg.threads_per_rank} is more than this machine's {cores} "
            f"cores; use threads_per_rank<={cores}, or 0 (cores / ranks)"
        )
    if cores and cfg.gpus > RANKS_PER_CORE * cores:
        most = RANKS_PER_CORE * cores
        errors.append(
            f"gpus={cfg.gpus} would start {cfg.gpus} CPU ranks on this machine's {cores} "
            f"cores, more than {most} ({RANKS_PER_CORE} per core, past which the step times "
            f"measure the scheduler); use gpus<={most} here, or {ELSEWHERE}"
        )
    elif machine.memory_bytes and cfg.gpus * CPU_RANK_BYTES > machine.memory_bytes:
        most = machine.memory_bytes // CPU_RANK_BYTES
        errors.append(
            f"gpus={cfg.gpus} CPU ranks need at least {cfg.gpus * CPU_RANK_BYTES / GIB:.1f} GiB "
            f"({CPU_RANK_BYTES / GIB:.2f} GiB each, the smallest rank measured), more than "
            f"this machine's {machine.memory_bytes / GIB:.1f} GiB; use gpus<={most} here, "
            f"or {ELSEWHERE}"
        )
    return errors
