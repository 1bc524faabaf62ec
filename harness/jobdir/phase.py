"""The running job's phase (build, warm-up, timed steps k/N, profile), for the live line.

Rank 0 writes it to `<job dir>/ranks/phase`; the runner reads it while it waits. Best
effort: a phase that cannot be written or read leaves the live line as it was.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.jobdir.paths import JobDir


def report_phase(job_dir: Path, rank: int, text: str) -> None:
    """Rank 0 says what it is doing now; other ranks do the same thing in lockstep."""
    if rank != 0:
        return
    path = JobDir(job_dir).phase
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # on SLURM no launcher made it
        tmp.write_text(text)
        os.replace(tmp, path)  # the reader never sees half a phase
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk keeps no half phase


def read_phase(job_dir: Path) -> str | None:
    try:
        return JobDir(job_dir).phase.read_text().strip() or None
    except OSError:
        return None
