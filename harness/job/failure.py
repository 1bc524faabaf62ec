"""A job that raised: its row, whatever the exception (a bug, a full disk, a bad HF config).

The sweep goes on to the next job and always reaches its end, so an exception in one job
must become that job's result: a status, an error a person can act on, and no temporary
files left behind to keep a full disk full.
"""

from __future__ import annotations

import errno
import os
import traceback
from pathlib import Path
from typing import Any

from harness.jobdir.paths import JobDir
from harness.jobdir.rank_outcome import classify
from harness.jobdir.result import Result, finished_ok, make_result, write_result


def describe_error(error: BaseException, job_dir: Path) -> tuple[str, str]:
    """(status, error text) for an exception the runner met while running a job."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        where = error.filename or job_dir
        fix = "free some space, or rerun into another hydra.sweep.dir"
        return "failed", f"no space left on {where} ({error.strerror}); {fix}"
    if isinstance(error, OSError) and error.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
        where = error.filename or job_dir
        return "failed", f"{where} is not writable ({error.strerror}); choose another directory"
    status = classify(error)
    return status, f"the runner raised {type(error).__name__}: {error}"


FULL_BELOW_BYTES = 1 << 20  # a file system with less than this free is full for a job


def disk_full(path: Path | str) -> bool:
    """Whether the file system holding `path` has (next to) no space left: ranks that died
    without a word there most likely could not write one."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < FULL_BELOW_BYTES


def full_disk_error(job_dir: Path) -> str:
    fix = "free some space, or rerun into another hydra.sweep.dir"
    return f"no space left on {job_dir} (the ranks could not write their files); {fix}"


def remove_temporaries(job_dir: Path) -> list[Path]:
    """Delete the half-written `.<name>.tmp` files an interrupted writer left (the atomic
    writers' temporaries); the job has ended, so nothing writes them any more."""
    removed = []
    for path in Path(job_dir).rglob(".*.tmp"):
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
    return removed


def failure_result(config: dict[str, Any], job_dir: Path, error: BaseException) -> Result:
    """The job's row for `error`, recorded in its directory where the disk still allows."""
    status, text = describe_error(error, job_dir)
    result = make_result(status=status, config=config, error=text)
    remove_temporaries(job_dir)
    if config.get("dry_run"):
        return result
    if not finished_ok(job_dir):
        try:
            write_result(job_dir, result)
        except OSError:  # the same full disk: the console and the summary still say it
            remove_temporaries(job_dir)
            return result
    _append_runner_log(job_dir, error)
    return result


def _append_runner_log(job_dir: Path, error: BaseException) -> None:
    """The traceback beside the job, for whoever fixes the cause (best effort)."""
    try:
        with open(JobDir(job_dir).runner_log, "a") as log:
            log.write("".join(traceback.format_exception(error)))
    except OSError:
        pass
