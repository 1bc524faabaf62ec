"""A reader that goes away (`python -m harness -m ... | head -1`) never takes the sweep down
(issue 30, L10)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import REPO

pytestmark = pytest.mark.slow


def test_a_closed_pipe_on_stdout_does_not_end_the_sweep(tmp_path: Path) -> None:
    overrides = ("model=llama_tiny", "seq_len=4096,8192")  # refused at once: no rank starts
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first line
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "-m", *overrides, f"hydra.sweep.dir={tmp_path}"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
        timeout=300,
    )
    os.close(write_end)
    assert "BrokenPipe" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr[-2000:]  # both jobs refused, as a sweep says
    assert (tmp_path / "results.csv").exists()
    assert len((tmp_path / "results.csv").read_text().splitlines()) == 3
