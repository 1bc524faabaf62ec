"""Nothing of a job outlives its runner, and a rerun never shares the job directory with an
earlier attempt's processes.

The ranks' launcher (`python -m harness.job.launch`) leads its own process group, so that a
job can be ended whole. That also takes it out of the runner's terminal and process
group: when the runner dies without ending it (SIGKILL, a crash), nothing else would. So
the launcher asks the kernel for SIGTERM when its parent dies (Linux's PR_SET_PDEATHSIG,
which torch then passes on to the ranks as SIGINT), and the runner records the group in
`<job dir>/attempt.json`, where a rerun finds it and ends what is left of it.

PIDs wrap (within minutes on a busy machine), and a runner killed by SIGKILL leaves its
attempt.json behind, so a recorded group number alone proves nothing: a group is ended only
while its leader is the recorded launcher, the process that started at the recorded moment
(its start time in /proc/<pid>/stat, in clock ticks since this boot) with a command line
naming `harness.job.launch` and this job directory. Anything else is left alone.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

ATTEMPT_FILE = "attempt.json"
RUNNER_PID_ENV = "YAFSDP_BENCH_RUNNER_PID"
_PR_SET_PDEATHSIG = 1


def die_with_runner() -> None:
    """In the launcher: get SIGTERM when the runner dies; exit now if it already has."""
    expected = os.environ.get(RUNNER_PID_ENV)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if expected is not None and os.getppid() != int(expected):  # died before prctl took
        sys.exit(1)


def record_attempt(job_dir: Path, pgid: int) -> None:
    """The process group of this attempt's launcher and ranks, for a later rerun, with what
    proves its leader later: its start time and this boot."""
    record = {
        "pgid": pgid,
        "host": socket.gethostname(),
        "runner_pid": os.getpid(),
        "leader_start": _start_time(pgid),
        "boot_id": _boot_id(),
    }
    (Path(job_dir) / ATTEMPT_FILE).write_text(json.dumps(record))


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name (field 3, the state, first); None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> int | None:
    """When `pid` started, in clock ticks after boot (field 22 of /proc/<pid>/stat)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def forget_attempt(job_dir: Path) -> None:
    """The attempt's processes have all been ended: nothing for a rerun to find."""
    (Path(job_dir) / ATTEMPT_FILE).unlink(missing_ok=True)


def _group_members(pgid: int) -> list[int]:
    """Live processes of process group `pgid` (Linux /proc; empty elsewhere)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat_fields(int(stat.parent.name))
        if fields is not None and len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def _is_the_attempt(record: dict, job_dir: Path) -> bool:
    """Whether the recorded group's leader is still the launcher this attempt started:
    same boot, same start time, a command line naming the launcher and this job directory.
    A record without them (an older version's) proves nothing."""
    pgid, started = record.get("pgid"), record.get("leader_start")
    if not isinstance(pgid, int) or not isinstance(started, int):
        return False
    if record.get("boot_id") != _boot_id():
        return False
    if _start_time(pgid) != started:
        return False
    try:
        args = Path(f"/proc/{pgid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    names = {os.fsencode(str(job_dir)), os.fsencode(str(Path(job_dir).resolve()))}
    return b"harness.job.launch" in args and bool(names & set(args))


def end_stray_attempt(job_dir: Path, timeout_s: float = 10.0) -> str | None:
    """End what is left of an earlier attempt's processes in `job_dir` (its runner died
    without ending them); return what was done, or None when nothing was left."""
    path = Path(job_dir) / ATTEMPT_FILE
    try:
        record = json.loads(path.read_text())
        pgid = int(record["pgid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if record.get("host") != socket.gethostname():
        return None  # another machine's processes: not ours to see or end
    members = _group_members(pgid) if _is_the_attempt(record, Path(job_dir)) else []
    if not members:
        path.unlink(missing_ok=True)
        return None
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    deadline = time.monotonic() + timeout_s
    while _group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    path.unlink(missing_ok=True)
    return (
        f"ended {len(members)} process(es) of an earlier attempt (process group {pgid}, "
        f"runner PID {record.get('runner_pid')}) still running in {job_dir}"
    )
