"""A resumed SLURM sweep whose earlier submitter died: its jobs may still be queued or
running. Submitting them again would run each twice into one job directory, so a job that
`<job dir>/slurm.json` names and that no submitter saw end is adopted instead: waited for,
and decided from its ranks, as if this submitter had sent it.
"""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path
from typing import Any

from harness.jobdir.recorded_config import flatten, is_neutral

log = logging.getLogger(__name__)
SLURM_RECORD = "slurm.json"
SUBMITTED = "SUBMITTED"  # the state slurm.json holds until a submitter sees the job end


def slurm_job_state(job_id: str) -> str | None:
    """The job's state as SLURM tells it (squeue while it is live, then sacct), or None
    when SLURM does not know the job (or cannot be asked)."""
    for command in (
        ["squeue", "-h", "-j", job_id, "-o", "%T"],
        ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"],
    ):
        try:
            out = subprocess.run(command, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        words = out.stdout.split() if out.returncode == 0 else []
        if words:
            return words[0].upper()
    return None


def read_record(job_dir: Path) -> dict[str, Any] | None:
    try:
        record = json.loads((Path(job_dir) / SLURM_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("job_id") else None


def unfinished_submission(job_dir: Path) -> dict[str, Any] | None:
    """slurm.json's record of a job no submitter saw end and that SLURM still knows
    (queued, running, or ended while nobody waited for it), with its `slurm_state`."""
    record = read_record(job_dir)
    if record is None or record.get("state") != SUBMITTED:
        return None
    state = slurm_job_state(str(record["job_id"]))
    return None if state is None else {**record, "slurm_state": state}


def same_config(recorded: dict[str, Any] | None, requested: dict[str, Any]) -> bool:
    """Whether the job was submitted with the config asked for now (fields that cannot
    change a measurement aside); a record without one is taken as the same."""
    if recorded is None:
        return True
    old, new = flatten(recorded), flatten(requested)
    return all(old.get(k) == new.get(k) for k in set(old) | set(new) if not is_neutral(k))


def adopt(
    job_dir: Path, config: dict[str, Any], world_size: int, folder: Path, desc: str
) -> Any | None:
    """The submitit job to wait for instead of submitting again, or None: submit. A job
    submitted with another config is cancelled (the caller submits this one instead)."""
    import submitit

    earlier = unfinished_submission(job_dir)
    if earlier is None:
        return None
    job_id = str(earlier["job_id"])
    if not same_config(earlier.get("config"), config):
        subprocess.run(["scancel", job_id], capture_output=True, check=False)
        log.warning(f"\t{desc}: cancelled SLURM job {job_id}, submitted with another config")
        return None
    log.warning(
        f"\t{desc}: adopted SLURM job {job_id} ({earlier['slurm_state']}), which an earlier "
        "submitter sent and never saw end"
    )
    return submitit.SlurmJob(folder=folder, job_id=job_id, tasks=range(world_size))
