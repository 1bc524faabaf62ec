"""Run the project's command-line entry points as a user would: a fresh Python process in
the repository, with this checkout first on the import path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_module(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python -m <args>` in the repository root; output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
