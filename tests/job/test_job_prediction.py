"""The job's predicted record: prediction.json, written once by the job before its ranks
start, planned for the ranks' device and yafsdp's budget as its engine gets it, with the
planner's why-lines against each baseline. The rank plans nothing but that budget."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from harness.config import JobConfig
from harness.engines.registry import ENGINES
from harness.job import run as job_run
from harness.jobdir.prediction import TERMS, prediction_path, read_prediction
from harness.placement import placed
from harness.plan.cli import plan
from harness.plan.fit import UNKNOWN_BUDGET, job_prediction
from harness.plan.planner import yafsdp_memory_budget
from tests.plan.planned import priced_config

TINY = JobConfig(model="llama_tiny", engine=ENGINES["yafsdp"].config(), gpus=2, seq_len=32)


def test_a_cpu_job_is_predicted_with_the_budget_its_engine_gets() -> None:
    found = job_prediction(replace(TINY, device="cpu"))
    assert found.error is None and set(found.terms) == set(TERMS)
    cpu = placed(replace(TINY, device="cpu"), torch.device("cpu"))
    assert found.memory_budget_bytes == yafsdp_memory_budget(cpu, torch.device("cpu"))
    assert "machine's memory" in found.budget_source
    assert found.why == {}  # no time on CPU, so no reasons


def test_a_gpu_job_without_a_memory_figure_says_why_it_has_no_prediction() -> None:
    found = job_prediction(TINY, device="cuda")  # the runner must not take GPU memory
    assert found.error is not None and UNKNOWN_BUDGET in found.error
    sized = job_prediction(replace(TINY, device_memory_gb=80.0), device="cuda")
    assert sized.error is None
    assert sized.memory_budget_bytes == yafsdp_memory_budget(
        placed(replace(TINY, device_memory_gb=80.0), torch.device("cuda"))
    )


def test_a_yafsdp_job_stores_the_planners_lines_against_each_baseline() -> None:
    priced = priced_config(JobConfig(model="llama_tiny", engine=ENGINES["yafsdp"].config(),
                                     gpus=4, seq_len=32))  # fmt: skip
    found = job_prediction(priced, device="cuda")
    assert found.error is None and found.terms["iteration_time_s"] > 0
    point = ["hardware=a100_80gb", "model=llama_tiny", "gpus=4", "seq_len=32", "device=cuda"]
    rows = plan([*point, "engine=yafsdp,fsdp1,fsdp2"])
    (yafsdp,) = [r for r in rows if r.cfg.engine.label == "yafsdp"]
    assert found.why["fsdp1"] == yafsdp.why["fsdp1"]  # what `python -m harness.plan` says
    assert set(found.why) >= {"fsdp1", "fsdp2"}


def test_the_job_writes_its_prediction_before_its_ranks_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []

    def launch(cfg: JobConfig, job_dir: Path, **_: object) -> tuple[int, bool]:
        seen.append(prediction_path(job_dir).exists())
        raise RuntimeError("no ranks in this test")

    monkeypatch.setattr("harness.job.launch.launch_local", launch)
    outcome = job_run.run_job(replace(TINY, device="cpu"), tmp_path / "job")
    assert seen == [True] and outcome.result.status == "failed"
    stored = read_prediction(tmp_path / "job")
    assert stored is not None and stored.error is None and stored.terms["peak_memory_bytes"]
