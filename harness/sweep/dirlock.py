"""One runner per sweep (or single job) directory: an exclusive lock file naming its holder.

Two runners in one directory would share its cores (every time wrong) and clear each
other's rank files. The lock is `flock` on `<dir>/.yafsdp-bench.lock`, which the kernel
drops when its holder dies; the file keeps the holder's PID and host, so a second runner
is told who holds it, and a runner that finds a dead holder's record says it takes over.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

LOCK_FILE = ".yafsdp-bench.lock"


class DirectoryLocked(RuntimeError):
    """Another live runner holds the directory; the message names it."""


class LockUnavailable(RuntimeError):
    """The directory or its lock file cannot be created or opened (not writable, another
    user's lock file): the runner cannot know who else writes there, so it must not run."""


class DirLock:
    """Held from `acquire` until `release` (or until this process exits)."""

    def __init__(self, directory: Path, fd: int, taken_over: dict[str, Any] | None) -> None:
        self.directory = directory
        self._fd: int | None = fd
        self.taken_over = taken_over  # the record of a dead holder this lock replaced

    def release(self) -> None:
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)  # an empty record: released cleanly, nothing stale
        os.close(self._fd)
        self._fd = None


def _holder(fd: int) -> dict[str, Any] | None:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 4096)
    try:
        record = json.loads(raw) if raw.strip() else None
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def lock_record(directory: Path) -> dict[str, Any] | None:
    """The record in `directory`'s lock file, read without locking; None where there is
    none or it was released."""
    try:
        fd = os.open(Path(directory) / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        return _holder(fd)
    finally:
        os.close(fd)


def describe_holder(record: dict[str, Any] | None) -> str:
    if not record:
        return "another process (no record)"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.get("since", 0)))
    return f"PID {record.get('pid')} on host {record.get('host')} (since {since})"


def _unavailable(directory: Path, what: str, error: OSError) -> str:
    lock = directory / LOCK_FILE
    if isinstance(error, PermissionError) and lock.exists() and os.access(directory, os.W_OK):
        return (
            f"cannot open the lock file {lock} ({error.strerror}): another user's runner "
            f"made it, so it may be writing in this {what}; choose another directory "
            f"(hydra.sweep.dir=... / hydra.run.dir=...), or have its owner remove it"
        )
    return (
        f"{what} {directory} is not writable ({error.strerror}); choose another directory "
        f"(hydra.sweep.dir=... / hydra.run.dir=...)"
    )


def acquire(directory: Path, *, what: str = "directory") -> DirLock:
    """Lock `directory` (created if needed) or raise DirectoryLocked naming the holder, or
    LockUnavailable when it cannot be locked at all."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise LockUnavailable(_unavailable(directory, what, e)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise DirectoryLocked(
            f"{what} {directory} is in use by {describe_holder(holder)}; wait for it to "
            f"finish, stop it, or choose another directory (hydra.sweep.dir=... / "
            f"hydra.run.dir=...)"
        ) from None
    previous = _holder(fd)  # a record left behind means its holder died holding the lock
    record = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)
    return DirLock(directory, fd, previous)
