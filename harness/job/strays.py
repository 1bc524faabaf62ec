"""Nothing of a job outlives its runner, and a rerun never shares the job directory with an
earlier attempt's processes.

The ranks' launcher (`python -m harness.job.launch`) leads its own process group, so that a
job can be ended whole. That also takes it out of the runner's terminal and process
group: when the runner dies without ending it (SIGKILL, a crash), nothing else would. So
the launcher asks the kernel for SIGTERM when its parent dies (Linux's PR_SET_PDEATHSIG,
which torch then passes on to the ranks as SIGINT), and the runner records the group in
`<job dir>/attempt.json`, where a rerun finds it and ends what is left of it.
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
    """The process group of this attempt's launcher and ranks, for a later rerun."""
    record = {"pgid": pgid, "host": socket.gethostname(), "runner_pid": os.getpid()}
    (Path(job_dir) / ATTEMPT_FILE).write_text(json.dumps(record))


def forget_attempt(job_dir: Path) -> None:
    """The attempt's processes have all been ended: nothing for a rerun to find."""
    (Path(job_dir) / ATTEMPT_FILE).unlink(missing_ok=True)


def _group_members(pgid: int) -> list[int]:
    """Live processes of process group `pgid` (Linux /proc; empty elsewhere)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def _is_ours(pid: int) -> bool:
    """A rank launcher or a rank (torch's spawned workers), not an unrelated process that
    happens to lead a group of that number."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    return b"harness.job.launch" in cmdline or b"spawn_main" in cmdline


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
    members = [pid for pid in _group_members(pgid) if _is_ours(pid)]
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
