"""`hydra/launcher=slurm` on the local SLURM: per-job task counts, failures as rows, resume.

Driven through a stand-in Hydra app (standin_app.py: real gloo ranks, injected faults), so
the launcher is proven independently of the benchmark runner.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.result import read_result

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
APP = Path(__file__).with_name("standin_app.py")
CASES = ("one", "two", "raise", "hang", "split")


def _sweep(sweep_dir: Path, cases: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        str(APP),
        "-m",
        "hydra/launcher=slurm",
        f"case={','.join(cases)}",
        f"hydra.sweep.dir={sweep_dir}",
        "hydra.sweep.subdir=${hydra.job.override_dirname}",
        "hydra.launcher.request_gpus=false",  # the test cluster has no GPU GRES
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def sweep(slurm_cluster: None, tmp_path_factory: pytest.TempPathFactory):
    sweep_dir = tmp_path_factory.mktemp("slurm_sweep")
    proc = _sweep(sweep_dir, CASES)
    return sweep_dir, proc


def _result(sweep_dir: Path, case: str) -> dict:
    return read_result(sweep_dir / f"case={case}" / "result.json")


def _submission_script(sweep_dir: Path, case: str) -> str:
    slurm_id = _slurm_job_id(sweep_dir, case)
    return (sweep_dir / ".submitit" / slurm_id / f"{slurm_id}_submission.sh").read_text()


def _slurm_job_id(sweep_dir: Path, case: str) -> str:
    outcome = json.loads((sweep_dir / f"case={case}" / "ranks" / "rank0.json").read_text())
    return str(outcome["slurm_job_id"])


def _step_ntasks(slurm_id: str) -> int:
    out = subprocess.run(
        ["sacct", "-n", "-P", "-j", f"{slurm_id}.0", "-o", "NTasks"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(out[0])


def test_every_job_is_a_row_with_its_status(sweep):
    sweep_dir, _ = sweep
    statuses = {case: _result(sweep_dir, case)["status"] for case in CASES}
    assert statuses == {
        "one": "ok",
        "two": "ok",
        "raise": "failed",
        "hang": "timeout",
        "split": "invalid",
    }


def test_jobs_get_their_own_task_counts(sweep):
    sweep_dir, _ = sweep
    for case, ntasks in (("one", 1), ("two", 2)):
        script = _submission_script(sweep_dir, case)
        assert "#SBATCH --nodes=1" in script
        assert f"#SBATCH --ntasks-per-node={ntasks}" in script
        assert "--gpus-per-node" not in script and "gres" not in script  # CPU cluster
        assert "#SBATCH --signal=USR2@15" in script
        assert "#SBATCH --time=2" in script  # job_timeout_s=120
        assert _step_ntasks(_slurm_job_id(sweep_dir, case)) == ntasks
        env = _result(sweep_dir, case)["env"]
        assert env["world_size"] == ntasks == int(env["slurm_ntasks"])
    # Ranks agree: all-reduce of (rank + 1) over 3 steps.
    assert _result(sweep_dir, "two")["metrics"]["allreduce_total"] == 3 * (1 + 2)


def test_every_rank_records_its_outcome_and_only_rank0_writes_job_files(sweep):
    sweep_dir, _ = sweep
    job = sweep_dir / "case=two"
    for r in (0, 1):
        assert json.loads((job / "ranks" / f"rank{r}.json").read_text())["status"] == "ok"
    assert (job / ".hydra" / "config.yaml").exists()
    assert (job / "ranks" / "rank1.log").exists()  # rank 1 logs beside its outcome


def test_rank_that_raises_is_the_reported_cause(sweep):
    sweep_dir, _ = sweep
    result = _result(sweep_dir, "raise")
    assert result["error"].startswith("rank 1: RuntimeError: injected fault: rank 1 raised")
    assert result["slurm"]["state"] == "FAILED"


def test_hung_rank_ends_by_collective_timeout(sweep):
    sweep_dir, _ = sweep
    error = _result(sweep_dir, "hang")["error"]
    assert "collective_timeout_s=5" in error and "waiting for ranks [1]" in error


def test_gpu_count_that_does_not_split_is_refused_before_submission(sweep):
    sweep_dir, proc = sweep
    result = _result(sweep_dir, "split")
    assert "gpus=3" in result["error"] and "gpus_per_node=2" in result["error"]
    assert not (sweep_dir / "case=split" / "ranks").exists()  # nothing ran
    assert re.search(r"case=split: refused before submission", proc.stderr + proc.stdout)


def test_resume_skips_ok_jobs_and_reruns_failed_ones(sweep):
    sweep_dir, _ = sweep
    ok_before = _result(sweep_dir, "one")
    ok_job = _slurm_job_id(sweep_dir, "one")
    failed_job = _slurm_job_id(sweep_dir, "raise")
    proc = _sweep(sweep_dir, ("one", "raise"))
    assert "case=one: skipped" in proc.stderr + proc.stdout
    assert _slurm_job_id(sweep_dir, "one") == ok_job and _result(sweep_dir, "one") == ok_before
    assert _slurm_job_id(sweep_dir, "raise") != failed_job  # resubmitted
    assert _result(sweep_dir, "raise")["status"] == "failed"
    assert (sweep_dir / "case=raise" / "result.previous.json").exists()
