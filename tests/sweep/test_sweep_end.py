"""An exception or a full disk in one job is that job's row, and the sweep's end (results.csv,
summary, lock release) always runs (issue 30: M1, M2). The faults are planted in the runner
process (tests/sweep/faulty_runner.py); the other job is refused before any rank starts."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.jobdir.result import read_result
from harness.sweep.dirlock import LOCK_FILE
from tests.processes import REPO

pytestmark = pytest.mark.slow

B = ("model=llama_tiny", "steps=2", "warmup_steps=1", "profile.steps=0")
GRID = ("seq_len=64,4096",)  # 64 meets the planted fault; 4096 is refused (past 1024)


def faulty_sweep(
    fault: str, sweep_dir: Path, grid: tuple[str, ...] = GRID
) -> subprocess.CompletedProcess[str]:
    runner = REPO / "tests" / "sweep" / "faulty_runner.py"
    return subprocess.run(
        [sys.executable, str(runner), fault, "-m", *B, *grid, f"hydra.sweep.dir={sweep_dir}"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def statuses(sweep_dir: Path) -> dict[str, str]:
    with open(sweep_dir / "results.csv") as f:
        return {row["config.seq_len"]: row["status"] for row in csv.DictReader(f)}


def job_dir(sweep_dir: Path, seq_len: int) -> Path:
    (path,) = sweep_dir.glob(f"*seq_len={seq_len}*")
    return path


def test_an_exception_in_one_job_is_its_row_and_the_sweep_ends(tmp_path: Path) -> None:
    proc = faulty_sweep("raise", tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert statuses(tmp_path) == {"64": "failed", "4096": "invalid"}
    error = read_result(job_dir(tmp_path, 64) / "result.json").error or ""
    assert error.startswith("the runner raised ZeroDivisionError"), error
    assert "sweep done: 2 jobs" in proc.stdout, out[-3000:]
    assert (tmp_path / LOCK_FILE).read_text() == "", "the lock's record was not released"
    assert "Traceback" in (job_dir(tmp_path, 64) / "runner.log").read_text()


def test_a_full_disk_fails_the_job_by_name_and_leaves_no_temporaries(tmp_path: Path) -> None:
    proc = faulty_sweep("enospc", tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert statuses(tmp_path) == {"64": "failed", "4096": "invalid"}
    error = read_result(job_dir(tmp_path, 64) / "result.json").error or ""
    assert error.startswith(f"no space left on {job_dir(tmp_path, 64)}/ranks/rank0.json"), error
    assert not list(tmp_path.rglob("*.tmp")), "temporaries keep a full disk full"
    assert "Traceback" not in proc.stdout


def test_a_full_disk_at_the_sweeps_end_is_said_and_fails_the_exit_status(tmp_path: Path) -> None:
    # Both jobs refused (exit status 2 alone): the unwritten table makes it 1.
    proc = faulty_sweep("enospc_csv", tmp_path / "sweep", ("seq_len=4096,8192",))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "sweep done: 2 jobs" in proc.stdout, out[-3000:]
    assert "results.csv not written: no space left on" in proc.stdout, out[-3000:]
    assert not list((tmp_path / "sweep").rglob("*.tmp"))
    assert "Traceback" not in out
