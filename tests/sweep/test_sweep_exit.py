"""A sweep's exit status says whether every job is ok, as pytest's does (issue 30, S2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.processes import run_module

pytestmark = pytest.mark.slow

B = ("model=llama_tiny", "steps=2", "warmup_steps=1", "profile.steps=0", "seq_len=32")


def sweep(sweep_dir: Path, *overrides: str):
    return run_module("harness", "-m", *B, *overrides, f"hydra.sweep.dir={sweep_dir}", timeout=300)


def test_a_sweep_with_a_failed_job_exits_1(tmp_path: Path) -> None:
    proc = sweep(tmp_path, "gpus=2", "fault.kind=crash", "fault.rank=1")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "1 failed" in proc.stdout
    assert "exit status 1: 1 job is not ok (allow_failures=true" in proc.stdout
    assert (tmp_path / "results.csv").exists()


def test_refused_jobs_exit_2_and_allow_failures_lets_a_drill_exit_0(tmp_path: Path) -> None:
    refused = sweep(tmp_path / "a", "seq_len=4096,8192")  # past llama_tiny's 1024 positions
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "2 invalid" in refused.stdout
    allowed = sweep(tmp_path / "b", "seq_len=4096,8192", "allow_failures=true")
    assert allowed.returncode == 0, allowed.stdout[-2000:] + allowed.stderr[-2000:]
    assert "exit status 0: 2 jobs are not ok, allowed by allow_failures=true" in allowed.stdout
    drill = sweep(tmp_path / "c", "+drill=invalid")  # a drill's own config allows its failure
    assert drill.returncode == 0, drill.stdout[-2000:] + drill.stderr[-2000:]


def test_allow_failures_must_be_a_boolean(tmp_path: Path) -> None:
    proc = sweep(tmp_path, "allow_failures=sometimes")
    assert proc.returncode != 0 and "allow_failures" in proc.stderr
    assert not list(tmp_path.glob("*/result.json"))
