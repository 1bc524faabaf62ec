"""The local single-node SLURM (see .ci/slurm-up.sh) for tests marked `slurm`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _cluster_answers() -> bool:
    try:
        states = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=10
        ).stdout.split()
        sacct = subprocess.run(["sacct", "-n", "-X", "-S", "now-1minutes"], timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    ready = any(s.startswith(("idle", "mixed", "allocated")) for s in states)
    return ready and sacct.returncode == 0


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """Use the running cluster, or start it (root only); skip only where it cannot start."""
    if _cluster_answers():
        return
    if os.geteuid() != 0:
        reason = "no SLURM answering and not root to start one"
        if shutil.which("sinfo") is None:
            reason = "SLURM is not installed (no `sinfo`)"
        pytest.skip(f"{reason}: run `sudo bash .ci/slurm-up.sh` first")
    if shutil.which("apt-get") is None and shutil.which("sinfo") is None:
        pytest.skip("SLURM is not installed (no `sinfo`) and no apt-get to install it")
    up = subprocess.run(
        ["bash", str(REPO / ".ci" / "slurm-up.sh")], capture_output=True, text=True, timeout=600
    )
    if up.returncode != 0 or not _cluster_answers():
        pytest.fail(f".ci/slurm-up.sh could not start SLURM:\n{up.stdout}\n{up.stderr}")
