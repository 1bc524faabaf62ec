"""A dry run totals the sweep's GPU-hours from the planner's step times."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.jobdir.result import make_result
from harness.plan.cli import job_configs
from harness.plan.fit import predicted_gpu_hours
from harness.plan.planner import predict_time
from harness.sweep.console import planned_gpu_hours


def test_a_jobs_gpu_hours_are_its_step_time_times_steps_times_gpus() -> None:
    (cfg,) = job_configs(["hardware=a100_80gb", "model=llama2_7b", "gpus=64", "engine=yafsdp"])
    got = predicted_gpu_hours(cfg)
    assert got is not None
    step = predict_time(cfg).iteration_time_s  # type: ignore[union-attr]
    steps = cfg.warmup_steps + cfg.steps + cfg.profile.warmup + cfg.profile.steps
    assert got["steps"] == steps
    assert got["gpu_hours"] == pytest.approx(step * steps * 64 / 3600)
    (cpu,) = job_configs(["hardware=cpu", "model=llama_tiny"])
    assert predicted_gpu_hours(cpu) is None  # no time figures on CPU


def test_the_dry_runs_summary_totals_them(tmp_path: Path) -> None:
    def dry(hours: float | None) -> object:
        metrics = {"predicted": {"gpu_hours": hours}} if hours is not None else None
        return make_result(status="ok", config={"dry_run": True}, metrics=metrics)

    line = planned_gpu_hours([dry(1.5), dry(2.0), dry(None)])  # type: ignore[list-item]
    assert line.startswith("planned: 3.5 GPU-hours for 2 job(s)")
    assert "1 job(s) without a time prediction" in line
