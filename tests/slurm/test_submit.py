"""The SLURM submitter's decisions, with sbatch replaced by a recorder: which jobs it submits
again, which it adopts, and what it keeps (issue 30: H1, M6)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from omegaconf import OmegaConf

from harness.config import JobConfig
from harness.jobdir.result import make_result, read_result, write_result
from harness.slurm.resources import JobShape
from harness.slurm.sweep import LauncherParams, PlannedJob, _submit


class RecordingExecutor:
    """Stands in for submitit's SlurmExecutor: records what would have gone to sbatch."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.submitted: list[dict[str, Any]] = []
        self._parameters: dict[str, Any] = {}

    def update_parameters(self, **parameters: Any) -> None:
        self._parameters = parameters

    def submit(self, *_args: Any) -> SimpleNamespace:
        self.submitted.append(self._parameters)
        job_id = str(100 + len(self.submitted))
        paths = SimpleNamespace(
            submission_file=self.folder / f"{job_id}.sh",
            stdout=self.folder / f"{job_id}_%t.out",
            stderr=self.folder / f"{job_id}_%t.err",
        )
        return SimpleNamespace(job_id=job_id, paths=paths)


def planned(job_dir: Path, **config: Any) -> PlannedJob:
    sweep_config = OmegaConf.create({"hydra": {"job": {"name": "test"}}, "job_timeout_s": 120})
    cfg = asdict(JobConfig(device="cpu", **config))
    return PlannedJob(0, [], sweep_config, job_dir, cfg, shape=JobShape(1, 2, None))


def submit(job: PlannedJob, tmp_path: Path) -> RecordingExecutor:
    executor = RecordingExecutor(tmp_path)
    _submit(job, executor, task=None, params=LauncherParams(submitit_folder=str(tmp_path)))
    return executor


def test_a_stored_ok_result_of_another_config_is_resubmitted(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    old = make_result(status="ok", config=asdict(JobConfig(device="cpu", lr=3e-4)))
    write_result(job_dir, old)
    job = planned(job_dir, lr=1e-3)  # the default lr changed since the result was measured
    assert len(submit(job, tmp_path).submitted) == 1
    assert not (job_dir / "result.json").exists()  # set aside, not passing for this attempt
    (kept,) = job_dir.glob("result.previous*.json")
    assert read_result(kept) == old


def test_a_stored_ok_result_of_the_same_config_is_kept(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    job = planned(job_dir)
    write_result(job_dir, make_result(status="ok", config=job.config))
    assert submit(job, tmp_path).submitted == []
    assert job.result is not None and job.result.ok


def _earlier_submission(job: PlannedJob, state: str = "SUBMITTED", **config: Any) -> None:
    record = {"job_id": "4242", "state": state, "config": {**job.config, **config}}
    job.job_dir.mkdir(parents=True, exist_ok=True)
    (job.job_dir / "slurm.json").write_text(json.dumps(record))


def test_a_job_an_earlier_submitter_left_running_is_adopted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.slurm.adopt as adopt

    asked: list[str] = []
    monkeypatch.setattr(adopt, "slurm_job_state", lambda job_id: asked.append(job_id) or "RUNNING")
    job = planned(tmp_path / "job")
    _earlier_submission(job)  # the submitter died after sbatch: slurm.json says SUBMITTED
    assert submit(job, tmp_path).submitted == []
    assert asked == ["4242"] and job.submitit_job.job_id == "4242"
    assert job.submitit_job.num_tasks == 2  # every rank's outcome is read when it ends


def test_an_earlier_job_that_a_submitter_saw_end_is_not_adopted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.slurm.adopt as adopt

    monkeypatch.setattr(adopt, "slurm_job_state", lambda job_id: "FAILED")
    job = planned(tmp_path / "job")
    _earlier_submission(job, state="FAILED")
    assert len(submit(job, tmp_path).submitted) == 1


def test_a_running_job_of_another_config_is_cancelled_and_resubmitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.slurm.adopt as adopt

    cancelled: list[list[str]] = []
    monkeypatch.setattr(adopt, "slurm_job_state", lambda job_id: "RUNNING")
    monkeypatch.setattr(adopt.subprocess, "run", lambda cmd, **kw: cancelled.append(cmd))
    job = planned(tmp_path / "job")
    _earlier_submission(job, lr=1.0)
    assert len(submit(job, tmp_path).submitted) == 1
    assert cancelled == [["scancel", "4242"]]
