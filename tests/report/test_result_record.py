"""The typed result.json: one writer, one checking reader, files round-trip unchanged."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from harness.jobdir.grid_point import GridPoint
from harness.jobdir.result import Metrics, make_result, read_result, write_result
from harness.results.table import JSON_METRICS, METRIC_COLUMNS


def test_a_result_round_trips_with_unknown_keys_and_explicit_nulls(tmp_path: Path) -> None:
    stored = {
        "schema_version": 1,
        "status": "failed",
        "error": "rank 1: boom",
        "config": {"engine": "yafsdp", "seq_len": 128},
        "env": {"host": "node1"},
        "metrics": {"iteration_time_s": 1.5, "peak_memory_reserved_bytes": None, "new": [1]},
        "profile": {"traces": ["traces/rank0.json.gz"], "kind": "cpu"},
        "engine_settings": None,
        "slurm": {"job_id": "7"},
    }
    (tmp_path / "result.json").write_text(json.dumps(stored))
    result = read_result(tmp_path / "result.json")
    assert (result.status, result.metrics.iteration_time_s) == ("failed", 1.5)
    assert result.engine == {"name": "yafsdp", "label": "yafsdp"}
    assert result.metrics.extra == {"new": [1]} and result.extra == {"slurm": {"job_id": "7"}}
    write_result(tmp_path, result)
    assert json.loads((tmp_path / "result.json").read_text()) == stored


def test_a_failure_writes_empty_metrics(tmp_path: Path) -> None:
    path = write_result(tmp_path, make_result(status="oom", config={}, error="over"))
    assert json.loads(path.read_text())["metrics"] == {}


def test_csv_columns_come_from_the_metrics_record() -> None:
    assert METRIC_COLUMNS[:3] == [
        "iteration_time_s",
        "iteration_time_p10_s",
        "iteration_time_p90_s",
    ]
    assert {"losses", "grad_norms", "step_times_s", "memory_breakdown"} <= set(JSON_METRICS)
    assert not set(METRIC_COLUMNS) & set(JSON_METRICS)
    declared = {f.name for f in fields(Metrics)} - {"extra", "nulls"}
    assert set(METRIC_COLUMNS) | set(JSON_METRICS) == declared


def test_a_grid_point_names_its_coordinates_and_setting() -> None:
    values = dict(model="llama_tiny", gpus=2, seq_len=128, ckpt_layers=1)
    values |= dict(micro_batch=1, grad_accum=2, dtype="bf16", seed=0)
    point = GridPoint.of(values, variant="lr=0.01")
    assert (point.model, point.seq_len, point.setting.grad_accum) == ("llama_tiny", 128, 2)
    label = "micro_batch=1, grad_accum=2, dtype=bf16, seed=0, model_impl=native, lr=0.01"
    assert point.setting.label() == label
    assert point == GridPoint.of(values, variant="lr=0.01") != GridPoint.of(values)
    # A job recorded before model_impl existed ran the native model; HF jobs never match it.
    hf = GridPoint.of(values | {"model_impl": "hf"})
    assert hf.setting.label().endswith("model_impl=hf")
    assert GridPoint.of(values | {"model_impl": "native"}) == GridPoint.of(values) != hf
