"""`dry_run=true` under `hydra/launcher=slurm` submits nothing and prints each job's sbatch
request; a submission that sbatch refuses is counted in the summary (issue 30, S1).

sbatch is replaced by a script on PATH that records each call and refuses it, so these run
without a cluster and would show at once a dry run that calls sbatch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import REPO

pytestmark = pytest.mark.slow


def _fake_sbatch(tmp_path: Path) -> tuple[dict[str, str], Path]:
    bin_dir, calls = tmp_path / "bin", tmp_path / "sbatch-calls"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f'#!/bin/sh\necho "$@" >> {calls}\necho "sbatch: error: test" >&2\nexit 1\n')
    sbatch.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return env, calls


def _slurm_sweep(env: dict[str, str], sweep_dir: Path, *overrides: str):
    cmd = [sys.executable, "-m", "harness", "-m", "hydra/launcher=slurm"]
    cmd += [*overrides, f"hydra.sweep.dir={sweep_dir}"]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_a_dry_run_submits_nothing_and_prints_each_sbatch_request(tmp_path: Path) -> None:
    env, calls = _fake_sbatch(tmp_path)
    sweep_dir = tmp_path / "sweep"
    proc = _slurm_sweep(
        env, sweep_dir, "engine=yafsdp,fsdp1", "hardware=a100_80gb", "model=llama2_7b",
        "gpus=64", "dry_run=true",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert not calls.exists(), f"sbatch was called: {calls.read_text()}"
    assert proc.returncode == 0, out[-3000:]
    lines = proc.stdout.splitlines()
    requests = [i for i, line in enumerate(lines) if line.strip().startswith("sbatch ")]
    assert len(requests) == 2, proc.stdout
    for i, name in zip(requests, ("yafsdp", "fsdp1"), strict=True):
        # the request, its chain, environment and script, the planner's row, the job's line
        assert "--nodes=8" in lines[i] and "--gpus-per-node=8" in lines[i]
        assert f"--job-name=llama2_7b-g64-s128-c0-{name} " in lines[i]
        # job_timeout_s=3600, then the warning's signal_delay_s=15 and SLURM's 60 s
        assert "--time=62" in lines[i]
        assert lines[i + 1].strip().startswith("chain: ")
        planner = next(k for k in range(i, len(lines)) if lines[k].strip().startswith("planner:"))
        script = [line.strip() for line in lines[i + 2 : planner]]
        assert f"#SBATCH --job-name=llama2_7b-g64-s128-c0-{name}" in script
        assert any(line.startswith("srun ") and sys.executable in line for line in script)
        assert "dry run ->" in lines[planner + 1] and "[ok]" in lines[planner + 1]
    assert "no --exclusive" in proc.stdout and "no --mem" in proc.stdout
    assert "dry run done: 2 jobs" in proc.stdout and "2 ok" in proc.stdout
    assert not sweep_dir.exists(), "a dry run must leave no directory"


def test_jobs_that_sbatch_refuses_are_counted_in_the_summary(tmp_path: Path) -> None:
    env, calls = _fake_sbatch(tmp_path)
    proc = _slurm_sweep(
        env, tmp_path / "sweep", "hardware=cpu", "engine=local,fsdp2", "gpus_per_node=2",
        "model=llama_tiny", "steps=2", "warmup_steps=1", "profile.steps=0", "seq_len=32",
        "hydra.launcher.request_gpus=false",
    )  # fmt: skip
    assert len(calls.read_text().splitlines()) == 2
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "sweep done: 2 jobs" in proc.stdout and "2 failed" in proc.stdout, proc.stdout
    assert "none finished" not in proc.stdout


def test_a_time_limit_shorter_than_the_job_needs_is_refused_before_submission(
    tmp_path: Path,
) -> None:
    env, calls = _fake_sbatch(tmp_path)
    proc = _slurm_sweep(
        env, tmp_path / "sweep", "engine=yafsdp", "gpus=2", "device=cpu",
        "hydra.launcher.time_min=1", "dry_run=true",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert not calls.exists(), f"sbatch was called: {calls.read_text()}"
    assert "hydra.launcher.time_min=1 is shorter than the job needs" in out, out[-3000:]
    assert "set time_min=62 or more" in out
