"""When a job ran, and in which round: what lets the report pair runs that ran together.

A *round* is one invocation of the runner: a sweep (Hydra multirun, locally or submitted
to SLURM) or a single run. Within a round the runner takes the engines in turns at each
grid point (A B A B ..., harness.sweep.order), so repeat r of YaFSDP and repeat r of a
baseline ran back to back, under the same machine state. A resume, a rerun or another sweep
combined into one report is another round: its runs may be days apart, on a machine that
has changed since. So the report pairs two runs only when they record the same round.

The round is an id made when the round starts (its UTC start time, host and PID), passed
to everything the round starts through the environment (the rank launcher, the ranks,
sbatch's tasks, which inherit the submitter's environment). result.json records it with
the job's start and end times (UTC, ISO 8601), so a reader can check both.
"""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from harness.jobdir.paths import JobDir
from harness.jobdir.result import CorruptResultError, Result, read_result, write_result

ROUND_ENV = "YAFSDP_BENCH_ROUND"


def utc_now() -> str:
    """This moment in UTC, ISO 8601 to the microsecond (`2026-11-28T12:00:00.123456+00:00`),
    as exact as time.time(), which a rerun's start is compared in (harness.job.rerun_since)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def new_round() -> str:
    """Start a round: an id of its own, in this process's environment from now on."""
    round_id = f"{utc_now()} {socket.gethostname()}:{os.getpid()}"
    os.environ[ROUND_ENV] = round_id
    return round_id


def current_round() -> str:
    """The round this process runs in (a new one if none was started: a single run)."""
    return os.environ.get(ROUND_ENV) or new_round()


def same_round(a: object, b: object) -> bool | None:
    """Whether two runs' recorded rounds are one; None when either recorded none (a result
    from before rounds were recorded: that they ran together cannot be checked)."""
    if not isinstance(a, str) or not a or not isinstance(b, str) or not b:
        return None
    return a == b


def stamp_result(job_dir: Path, result: Result, started_at: str) -> Result:
    """`result` with when it ran (from `started_at` to now) and its round; the job's
    result.json (this attempt's, whatever it says) gets the same stamp. A directory that
    cannot take it keeps its file as it is: the row in hand still has its times."""
    ended_at, round_id = utc_now(), current_round()

    def stamped(r: Result) -> Result:
        return replace(r, started_at=started_at, ended_at=ended_at, round=round_id)

    try:
        write_result(job_dir, stamped(read_result(JobDir(job_dir).result)))
    except (CorruptResultError, OSError):
        pass
    return stamped(result)
