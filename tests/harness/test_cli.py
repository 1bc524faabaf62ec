"""The one-job CLI end to end, and refusal of bad input before any rank starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import EngineConfig, JobConfig
from harness.validate import validation_errors
from tests.processes import run_module

METRIC_FIELDS = (
    "step_times_s",
    "iteration_time_s",
    "iteration_time_p10_s",
    "iteration_time_p90_s",
    "tokens_per_s_per_device",
    "tflops_per_device",
    "mfu",
    "peak_memory_allocated_bytes",
    "peak_rss_bytes",
    "losses",
)


def run_cli(*overrides: str, run_dir: Path) -> subprocess.CompletedProcess:
    return run_module("harness", *overrides, f"hydra.run.dir={run_dir}", timeout=600)


def test_one_job_writes_a_complete_result(tmp_path: Path) -> None:
    proc = run_cli(
        "model=llama_tiny",
        "engine=fsdp2",
        "gpus=2",
        "seq_len=128",
        "ckpt_layers=1",
        "steps=3",
        "profile.steps=0",
        run_dir=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["schema_version"] == 1
    assert result["status"] == "ok" and result["error"] is None
    config = result["config"]
    assert (config["model"], config["engine"]["name"], config["gpus"]) == ("llama_tiny", "fsdp2", 2)
    assert (config["seq_len"], config["ckpt_layers"]) == (128, 1)
    env = result["env"]
    for field in ("torch", "device_name", "backend", "world_size", "host", "git_revision"):
        assert field in env, field
    assert env["backend"] == "gloo" and env["world_size"] == 2
    metrics = result["metrics"]
    for field in METRIC_FIELDS:
        assert metrics[field] is not None, field
    assert len(metrics["step_times_s"]) == 3
    assert len(metrics["losses"]) == 2 + 3  # warm-up and timed steps
    p10, median, p90 = (metrics[f"iteration_time_{k}"] for k in ("p10_s", "s", "p90_s"))
    assert 0 < p10 <= median <= p90
    assert metrics["tokens_per_s_per_device"] == pytest.approx(128 / median)
    assert 0 < metrics["mfu"] < 1
    assert metrics["peak_memory_allocated_bytes"] > 1_311_872 * 4  # at least the fp32 model
    if sys.platform.startswith("linux"):
        assert metrics["peak_rss_scope"] == "timed steps"
    # Every rank recorded how it ended.
    outcomes = sorted((tmp_path / "ranks").glob("rank*.json"))
    assert [json.loads(p.read_text())["status"] for p in outcomes] == ["ok", "ok"]


@pytest.mark.parametrize(
    ("override", "field", "hint"),
    [
        ("ckpt_layers=9", "ckpt_layers", "0..4"),
        ("seq_len=0", "seq_len", "at least 1"),
        ("gpus=0", "gpus", "at least 1"),
    ],
)
def test_invalid_input_is_refused_before_any_rank(
    override: str, field: str, hint: str, tmp_path: Path
) -> None:
    proc = run_cli(override, run_dir=tmp_path)
    assert proc.returncode == 2
    assert f"{field}=" in proc.stdout and hint in proc.stdout
    assert not (tmp_path / "ranks").exists(), "no rank may start for an invalid config"
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "invalid" and field in result["error"]


def test_an_unknown_model_is_refused_before_the_job_starts(tmp_path: Path) -> None:
    # A config-group value is checked before Hydra composes the job: no job directory.
    proc = run_cli("model=nope", run_dir=tmp_path)
    assert proc.returncode == 2
    assert "model=" in proc.stderr and "llama2_7b" in proc.stderr
    assert not (tmp_path / "ranks").exists() and not (tmp_path / "result.json").exists()


def test_unknown_engine_lists_the_engines(tmp_path: Path) -> None:
    proc = run_cli("engine=nope", run_dir=tmp_path)
    assert proc.returncode != 0
    assert "engine" in proc.stderr and "fsdp2" in proc.stderr and "yafsdp" in proc.stderr


def test_validation_names_fields_and_fixes() -> None:
    cfg = JobConfig(
        model="llama2_70b",
        gpus=12,
        gpus_per_node=8,
        device_memory_gb=80,
        engine=EngineConfig(name="fsdp2", label="fsdp2"),
    )
    errors = validation_errors(cfg)
    assert any("gpus=12" in e and "gpus_per_node=8" in e for e in errors)
    small = JobConfig(
        model="llama2_70b",
        gpus=8,
        device_memory_gb=80,
        engine=EngineConfig(name="fsdp2", label="fsdp2"),
    )
    (fit,) = validation_errors(small)
    assert "device_memory_gb=80" in fit and "gpus>=" in fit
    sharded = JobConfig(
        model="llama2_70b",
        gpus=64,
        device_memory_gb=80,
        engine=EngineConfig(name="fsdp2", label="fsdp2"),
    )
    assert validation_errors(sharded) == []
    unsharded = JobConfig(model="llama2_70b", gpus=64, device_memory_gb=80)  # engine local
    (fit,) = validation_errors(unsharded)
    assert "engine=local" in fit
