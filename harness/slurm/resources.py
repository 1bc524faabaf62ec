"""What one job asks SLURM for: nodes, tasks and GPUs from the job's world size.

One SLURM task per GPU (rank). A job that fits on one node gets exactly its GPU count there;
a larger one must fill whole nodes, so `gpus` must be a multiple of `gpus_per_node`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from harness.node_split import node_split_error


class ShapeError(ValueError):
    """The job's GPU count cannot be laid out on nodes; the message says what to change."""


@dataclass(frozen=True)
class JobShape:
    nodes: int
    tasks_per_node: int
    gpus_per_node: int | None  # what sbatch gets as --gpus-per-node; None: ask for no GPUs

    @property
    def world_size(self) -> int:
        return self.nodes * self.tasks_per_node


def job_shape(gpus: int, gpus_per_node: int, *, request_gpus: bool) -> JobShape:
    """nodes = gpus / gpus_per_node, tasks_per_node = min(gpus, gpus_per_node).

    `request_gpus` False is for clusters without GPU GRES (CPU test clusters), where asking
    for GPUs makes sbatch fail outright.
    """
    if gpus < 1:
        raise ShapeError(f"gpus={gpus}: the world size must be at least 1; set gpus>=1")
    if gpus_per_node < 1:
        raise ShapeError(f"gpus_per_node={gpus_per_node}: must be at least 1")
    if split_error := node_split_error(gpus, gpus_per_node):
        raise ShapeError(split_error)
    tasks_per_node = min(gpus, gpus_per_node)
    nodes = gpus // tasks_per_node
    return JobShape(
        nodes=nodes,
        tasks_per_node=tasks_per_node,
        gpus_per_node=tasks_per_node if request_gpus else None,
    )


# SLURM checks its timers about once a minute, so its warning signal (`--signal=USR2@d`)
# may come up to this much earlier than `d` seconds before the time limit.
SLURM_SIGNAL_EARLY_S = 60


def time_limit_min(job_timeout_s: float, signal_delay_s: float) -> int:
    """SLURM's --time (whole minutes, at least 1) that gives the job its job_timeout_s
    before SLURM's warning signal can come (signal_delay_s before the limit, and up to
    SLURM_SIGNAL_EARLY_S earlier): the warning ends the job, so it must not come first."""
    if job_timeout_s <= 0:
        raise ShapeError(f"job_timeout_s={job_timeout_s}: must be positive")
    needed_s = job_timeout_s + signal_delay_s + SLURM_SIGNAL_EARLY_S  # submitit always asks
    return max(1, math.ceil(needed_s / 60))


def time_limit_error(
    *, time_min: int | None, job_timeout_s: float, signal_delay_s: float
) -> str | None:
    """Why a `hydra.launcher.time_min` is too short for the job (SLURM's warning could end
    it before its job_timeout_s), or None; an unset time_min is derived, so it fits."""
    needed = time_limit_min(job_timeout_s, signal_delay_s)  # a bad job_timeout_s raises
    if time_min is None or time_min >= needed:
        return None
    return (
        f"hydra.launcher.time_min={time_min} is shorter than the job needs: SLURM's warning "
        f"signal comes signal_delay_s={signal_delay_s:g} s before the limit (and up to "
        f"{SLURM_SIGNAL_EARLY_S} s earlier) and ends the job, which asks for "
        f"job_timeout_s={job_timeout_s:g}; set time_min={needed} or more, leave it unset "
        "(it is then derived), or lower job_timeout_s"
    )


def sbatch_time_min(time_min: int | None, job_timeout_s: float, signal_delay_s: float) -> int:
    """The job's --time: the launcher's time_min, else time_limit_min."""
    return time_min or time_limit_min(job_timeout_s, signal_delay_s)


def job_name(config: dict[str, Any], fallback: str) -> str:
    """A SLURM job name that says which job it is in `squeue`:
    `llama2_7b-g64-s2048-c0-yafsdp-r1` (the repeat only where there are several)."""
    engine = config.get("engine")
    label = engine.get("label") or engine.get("name") if isinstance(engine, dict) else None
    if not config.get("model") or not label:
        return fallback
    name = f"{config['model']}-g{config.get('gpus')}-s{config.get('seq_len')}"
    name += f"-c{config.get('ckpt_layers')}-{label}"
    if (config.get("repeats") or 1) > 1:
        name += f"-r{config.get('repeat', 0)}"
    return re.sub(r"[^A-Za-z0-9_.:-]+", "_", name.removeprefix("hf:"))[:120]
