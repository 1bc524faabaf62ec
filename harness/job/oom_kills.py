"""How many processes the kernel's out-of-memory killer has killed in this process's
cgroup: read before and after a job, a SIGKILLed rank can be named an OOM kill.

cgroup v2 keeps the count in `memory.events` (`oom_kill N`), v1 in `memory.oom_control`.
None where neither can be read (not Linux, no memory controller): the evidence is absent,
and a SIGKILL stays a SIGKILL.
"""

from __future__ import annotations

from pathlib import Path

PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _candidates(proc_cgroup: Path, root: Path) -> list[Path]:
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return []
    files = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":  # v2: one unified hierarchy
            files += [root / relative / "memory.events", root / "memory.events"]
        elif "memory" in controllers.split(","):  # v1
            files += [
                root / "memory" / relative / "memory.oom_control",
                root / "memory" / "memory.oom_control",  # a container sees its own at the top
            ]
    return files


def oom_kill_count(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> int | None:
    """The cgroup's `oom_kill` count, or None when it cannot be read."""
    for path in _candidates(proc_cgroup, root):
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None


def oom_kills_since(before: int | None) -> int:
    """OOM kills in the cgroup since `before` was read (0 when either is unknown)."""
    after = oom_kill_count()
    if before is None or after is None:
        return 0
    return max(0, after - before)
