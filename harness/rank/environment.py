"""What a result was measured on: software versions, devices, host and git revision."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

# A tree copied to a machine without its `.git` (a GPU node given a copy) cannot ask git:
# `make gpu-check` passes the revision in this variable, read where git answers nothing.
REVISION_ENV = "HARNESS_GIT_REVISION"


def git_revision(repo: Path | None = None) -> str | None:
    """The checkout's revision (with `-dirty` when tracked files changed); where git cannot
    tell (no `.git`), the one passed in `$HARNESS_GIT_REVISION`; else None."""
    return _git_revision(repo or Path(__file__).resolve().parents[2]) or (
        os.environ.get(REVISION_ENV) or None
    )


def _git_revision(repo: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{out}-dirty" if dirty else out


def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"CPU: {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return f"CPU: {platform.machine()}"


def _backend(on_cuda: bool) -> str:
    import torch.distributed as dist

    from harness.placement import resolve_backend

    if dist.is_available() and dist.is_initialized():
        return str(dist.get_backend())  # gloo may run on CUDA too
    return resolve_backend("auto", "cuda" if on_cuda else "cpu")


def describe_environment(*, device: Any, world_size: int, threads_per_rank: int) -> dict[str, Any]:
    import torch

    from harness.placement import nccl_version

    on_cuda = device.type == "cuda"
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda if on_cuda else None,
        "nccl": nccl_version() if on_cuda else None,
        "backend": _backend(on_cuda),
        "device_name": torch.cuda.get_device_name(device)
        if on_cuda
        else platform.processor() or platform.machine(),
        "device_type": device.type,
        "device_count": torch.cuda.device_count() if on_cuda else 1,
        "world_size": world_size,
        "threads_per_rank": threads_per_rank,
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "git_revision": git_revision(),
    }
