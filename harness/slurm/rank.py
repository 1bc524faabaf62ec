"""Inside one SLURM task: this rank's distributed environment.

The rank outcome files (`<job_dir>/ranks/rank<r>.json`) are harness.jobdir.rank_outcome's; the
worker writes them, and the SLURM task writes one where the worker never ran.
"""

from __future__ import annotations

import os

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
