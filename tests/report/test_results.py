"""results.csv: one row per job with grid coordinates, status, metrics, env; corrupt files
are listed and skipped; the standalone command rebuilds it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
from sweep_fixtures import write_job

from harness.results.table import collect_results, write_results_csv

REPO = Path(__file__).resolve().parents[2]


def test_one_row_per_job_with_coordinates_metrics_and_env(sweep: Path) -> None:
    # A job nested one level further down (Hydra subdir layouts) is found too.
    write_job(sweep, "nested/6", model="llama_small", engine="fsdp2_tuned", gpus=4)
    df = collect_results(sweep)
    assert len(df) == 7
    row = df.set_index("job_dir").loc["nested/6"]
    assert (row["model"], row["gpus"], row["seq_len"], row["ckpt_layers"]) == (
        "llama_small",
        4,
        128,
        0,
    )
    assert (row["engine"], row["engine_name"], row["status"]) == ("fsdp2_tuned", "fsdp2", "ok")
    assert (row["dtype"], row["micro_batch"], row["grad_accum"], row["seed"]) == ("bf16", 1, 1, 0)
    assert row["iteration_time_s"] == 1.0
    assert row["final_loss"] == 7.0
    assert row["losses"] == [7.6, 7.5, 7.3, 7.2, 7.0]
    assert row["memory_breakdown"] == {"params": 10, "grads": 10}
    assert row["profile_overlap_pct"] == 50.0
    assert row["profile_exposed_comm_s_per_step"] == 0.01
    assert (row["torch"], row["backend"], row["world_size"], row["git_revision"]) == (
        "2.13.0+cpu",
        "gloo",
        4,
        "abc1234",
    )
    assert row["device_name"] == "cpu"
    assert df.attrs["problems"] == []


def test_failed_job_is_a_row_with_status_and_error(sweep: Path) -> None:
    df = collect_results(sweep).set_index("job_dir")
    assert df.loc["4", "status"] == "oom"
    assert df.loc["4", "error"] == "OutOfMemory: cap"
    assert pd.isna(df.loc["4", "iteration_time_s"])


def test_corrupt_result_is_listed_and_skipped(sweep: Path) -> None:
    (sweep / "7").mkdir()
    (sweep / "7" / "result.json").write_text('{"schema_version": 1, "status": "o')
    (sweep / "8").mkdir()
    (sweep / "8" / "result.json").write_text(
        json.dumps({"schema_version": 1, "status": "weird", "config": {}})
    )
    problems: list[str] = []
    df = collect_results(sweep, problems=problems)
    assert sorted(df["job_dir"]) == ["0", "1", "2", "3", "4", "5"]
    assert len(problems) == 2 and problems == df.attrs["problems"]
    assert problems[0].startswith("corrupt result file 7/result.json: unreadable result")
    assert problems[1] == "corrupt result file 8/result.json: unknown status 'weird'"


def test_results_csv_round_trips(sweep: Path) -> None:
    path = write_results_csv(sweep)
    assert path == sweep / "results.csv"
    df = pd.read_csv(path)
    assert len(df) == 6
    assert list(df.columns[:8]) == [
        "job_dir",
        "model",
        "gpus",
        "seq_len",
        "ckpt_layers",
        "engine",
        "repeat",
        "engine_name",
    ]
    assert sorted(df["status"]) == ["ok"] * 5 + ["oom"]
    assert df.set_index("job_dir").loc[0, "iteration_time_s"] == 0.9


def test_empty_sweep_gives_header_only(tmp_path: Path) -> None:
    path = write_results_csv(tmp_path)
    assert pd.read_csv(path).empty
    assert "status" in pd.read_csv(path).columns


def test_standalone_command_rebuilds_results_csv(sweep: Path) -> None:
    (sweep / "results.csv").write_text("stale\n")
    (sweep / "9").mkdir()
    (sweep / "9" / "result.json").write_text("")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "harness.results", str(sweep)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert f"wrote {sweep / 'results.csv'}: 6 jobs (5 ok, 1 oom)" in proc.stdout
    assert "skipped corrupt result file 9/result.json" in proc.stdout
    assert len(pd.read_csv(sweep / "results.csv")) == 6
