"""Inside one SLURM task: this rank's distributed environment; rank outcome files.

The outcome files themselves (`<job_dir>/ranks/rank<r>.json`) are harness.rank_outcome's;
the worker writes them, and the SLURM task writes one where the worker never ran.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

RANKS_DIR = "ranks"

# sbatch exports the submitter's whole environment; a submitter that itself ran under
# torchrun/SLURM would hand these to every rank, and submitit refuses to overwrite them.
INHERITED_DIST_VARS = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_USE_AGENT_STORE",
)


def export_rank_env() -> tuple[int, int]:
    """Set RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT/LOCAL_RANK from the SLURM job.

    The port is derived from the job id, so every rank agrees on it. Returns (rank, world).
    """
    import submitit

    for var in INHERITED_DIST_VARS:
        os.environ.pop(var, None)
    env = submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    return env.rank, env.world_size


def rank_file(job_dir: Path, rank: int) -> Path:
    return Path(job_dir) / RANKS_DIR / f"rank{rank}.json"


def clear_previous_attempt(job_dir: Path) -> None:
    """Before a (re)submission: what an earlier attempt left must not pass for this one's."""
    shutil.rmtree(Path(job_dir) / RANKS_DIR, ignore_errors=True)
    shutil.rmtree(Path(job_dir) / "traces", ignore_errors=True)
