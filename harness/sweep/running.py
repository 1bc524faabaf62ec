"""Is a sweep running now, and which of its jobs are in flight? Read from the lock records
(`dirlock`): a record names its holder's PID and host, and an empty one was released.

A table or report of a running sweep is partial: a job in flight has no result yet (a
rerun sets the old one aside first), so it would be missing without a word. Nothing here
takes a lock, even for a moment: a runner starting a job must never find it taken.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.sweep.dirlock import LOCK_FILE, describe_holder, lock_record

# A PID's start time is read in clock ticks since boot; records keep seconds since the epoch.
_SLACK_S = 2.0
SWEEP_MARK = "multirun.yaml"  # what Hydra writes in every sweep directory


@dataclass
class Running:
    """The runner holding a sweep's lock, and its job directories held now."""

    sweep: Path
    holder: str  # "PID n on host h (since ...)"
    checked: bool  # the holder's PID was found alive here (False: another host's runner)
    jobs: list[str] = field(default_factory=list)  # job directories in flight, relative

    def line(self) -> str:
        """One sentence for a table's or report's head."""
        how = "" if self.checked else " (another host's runner: not checked from here)"
        flight = ", ".join(f"`{j}`" for j in self.jobs) if self.jobs else "none just now"
        return (
            f"The sweep `{self.sweep}` is running: its lock names {self.holder}{how}. What "
            f"follows is partial; jobs in flight: {flight}. Render again when it has ended."
        )


def running_sweep(sweep_dir: Path) -> Running | None:
    """The sweep's live runner and its jobs in flight, or None when no live runner holds
    the sweep or any of its job directories. A job's record from another host counts only
    while the sweep's runner may live: a SLURM job killed on its node leaves one behind."""
    sweep_dir = Path(sweep_dir)
    record = lock_record(sweep_dir)
    live = _alive(record)
    counts = (True,) if live is False else (True, None)
    jobs = sorted(
        str(lock.parent.relative_to(sweep_dir))
        for lock in sweep_dir.rglob(LOCK_FILE)
        if lock.parent != sweep_dir and _alive(lock_record(lock.parent)) in counts
    )
    if live is False and not jobs:
        return None
    holder = describe_holder(record) if live is not False else "no live runner"
    return Running(sweep_dir, holder, checked=live is True, jobs=jobs)


def _alive(record: dict[str, Any] | None) -> bool | None:
    """True: the holder lives on this host; False: released, or its PID is gone (or is a
    later process with the same PID); None: another host's, which cannot be checked."""
    if not record or not isinstance(record.get("pid"), int):
        return False
    if record.get("host") != socket.gethostname():
        return None
    pid = record["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        pass
    started = _start_time(pid)
    since = record.get("since")
    if started is not None and isinstance(since, int | float):
        return started <= since + _SLACK_S
    return True


def _start_time(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), from /proc; None elsewhere."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the command name
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def describe_running(sweep_dirs: list[Path]) -> list[str]:
    """A line for each sweep that is running now."""
    found = (running_sweep(s) for s in sweep_dirs)
    return [r.line() for r in found if r is not None]


def nested_in_use(sweep_dir: Path) -> str | None:
    """Why a sweep in `sweep_dir` would share a tree with a live runner: a directory above
    it is locked (another sweep, or one of its jobs), or a sweep below it is; else None.
    Two such sweeps run at once, and the outer one's table later takes in the inner's jobs."""
    sweep_dir = Path(sweep_dir).resolve()
    for above in sweep_dir.parents:
        record = lock_record(above)
        if _alive(record) is not False:
            return _nested(sweep_dir, "inside", above, record)
    for lock in sweep_dir.rglob(LOCK_FILE):
        below = lock.parent
        if below != sweep_dir and (below / SWEEP_MARK).exists():
            record = lock_record(below)
            if _alive(record) is not False:
                return _nested(sweep_dir, "around", below, record)
    return None


def _nested(sweep_dir: Path, how: str, other: Path, record: dict[str, Any] | None) -> str:
    live = _alive(record)
    unsure = (
        f"; if it is not running, remove {other / LOCK_FILE}" if live is None else ""
    )  # another host's runner cannot be checked from here
    return (
        f"sweep directory {sweep_dir} is {how} {other}, which is in use by "
        f"{describe_holder(record)}: both would run at once and the outer sweep's table "
        f"would take in the inner one's jobs; choose a directory outside it "
        f"(hydra.sweep.dir=...){unsure}"
    )
