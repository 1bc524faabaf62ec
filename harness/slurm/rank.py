"""Inside one SLURM task: the distributed environment of this rank and its outcome file.

Only rank 0's return value reaches the submitter through submitit, so every rank records
its own outcome in `<job_dir>/ranks/rank<r>.json`; the submitter decides the job's status
from all of them (see `outcome.py`).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from harness.result import write_json_atomic

RANKS_DIR = "ranks"
RANK_STATUSES = ("ok", "failed", "oom", "timeout")

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


def classify_exception(exc: BaseException) -> str:
    """Rank status for an exception: oom, timeout (a collective's timeout, or submitit's
    wall-clock signal) or failed."""
    name = type(exc).__name__
    text = str(exc).lower()
    if isinstance(exc, MemoryError) or name.endswith("OutOfMemoryError") or "out of memory" in text:
        return "oom"
    if "timed out" in text or "timed-out" in text or "timeout" in name.lower():
        return "timeout"
    return "failed"


def write_rank_outcome(
    job_dir: Path, rank: int, status: str, error: str | None = None, **extra: Any
) -> Path:
    if status not in RANK_STATUSES:
        raise ValueError(f"status={status!r}; expected one of {RANK_STATUSES}")
    path = rank_file(job_dir, rank)
    write_json_atomic(
        path,
        {
            "rank": rank,
            "status": status,
            "error": error,
            "host": socket.gethostname(),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "time": time.time(),
            **extra,
        },
    )
    return path


def read_rank_outcomes(job_dir: Path) -> dict[int, dict[str, Any]]:
    """Outcomes by rank; an unreadable file counts as a failed rank, not as a missing one."""
    out: dict[int, dict[str, Any]] = {}
    for path in sorted((Path(job_dir) / RANKS_DIR).glob("rank*.json")):
        try:
            rank = int(path.stem.removeprefix("rank"))
        except ValueError:
            continue
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or data.get("status") not in RANK_STATUSES:
                raise ValueError("not a rank outcome")
        except (OSError, ValueError) as e:
            data = {"rank": rank, "status": "failed", "error": f"unreadable {path.name}: {e}"}
        out[rank] = data
    return out


def clear_rank_outcomes(job_dir: Path) -> None:
    """Before a (re)submission: outcomes of an earlier attempt must not be mistaken for new."""
    for path in (Path(job_dir) / RANKS_DIR).glob("rank*.json"):
        path.unlink(missing_ok=True)
