"""The report never drops or merges jobs silently: damaged results are listed problems, and
jobs that differ in any config field are told apart."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from sweep_fixtures import demo_sweep, write_job

from harness.report import build_report
from harness.results.table import collect_results


def _set_config(path: Path, **fields: object) -> None:
    result = json.loads(path.read_text())
    result["config"].update(fields)
    path.write_text(json.dumps(result))


def test_a_malformed_result_is_listed_and_the_rest_renders(tmp_path: Path) -> None:
    sweep = demo_sweep(tmp_path / "sweep")
    for job, metric, bad in (("7", "losses", "abc"), ("8", "iteration_time_s", "fast")):
        path = write_job(sweep, job, engine="fsdp2_tuned")
        result = json.loads(path.read_text())
        result["metrics"][metric] = bad
        path.write_text(json.dumps(result))
    assert len(collect_results(sweep)) == 6
    text = build_report([sweep], tmp_path / "out").read_text()
    assert "6 jobs" in text
    problems = text.split("## Problems")[1]
    assert "7/result.json" in problems and "metrics.losses='abc'" in problems
    assert "8/result.json" in problems and "metrics.iteration_time_s='fast'" in problems


def test_jobs_differing_in_an_unmatched_field_are_all_shown(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for job, engine, lr, t in (
        ("a", "yafsdp", 3e-4, 1.0),
        ("b", "yafsdp", 1e-2, 2.0),
        ("c", "fsdp1", 3e-4, 1.5),
        ("d", "fsdp1", 1e-2, 3.0),
    ):
        _set_config(write_job(sweep, job, engine=engine, step_times=[t] * 5), lr=lr)
    table = collect_results(sweep)
    assert sorted(table["config.lr"]) == [3e-4, 3e-4, 1e-2, 1e-2]
    text = build_report([sweep], tmp_path / "out").read_text()
    assert "runs; using" not in text, "a job was taken for a repeat of another"
    setting = "Setting: micro_batch=1, grad_accum=1, dtype=bf16, seed=0, model_impl=native"
    assert f"{setting}, lr=0.01." in text
    assert f"{setting}, lr=0.0003." in text
    timing = text.split("## Iteration time and noise")[1].split("## ")[0]
    assert "| engine | setting |" in timing
    assert timing.count("lr=0.01 |") == 2 and timing.count("lr=0.0003 |") == 2
    combined = pd.read_csv(tmp_path / "out" / "results.csv")
    assert "config.lr" in combined.columns


def test_engine_knobs_that_come_with_the_label_are_no_variant(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    write_job(sweep, "0", engine="fsdp2")
    write_job(sweep, "1", engine="fsdp2_tuned")  # async_unshard differs by design
    write_job(sweep, "2", engine="yafsdp")
    text = build_report([sweep], tmp_path / "out").read_text()
    assert "async_unshard" not in text and "| setting |" not in text


def test_a_baseline_knob_off_its_registered_value_is_a_variant(tmp_path: Path) -> None:
    """Every fsdp1 job reduced in bf16: not the published baseline (fp32 reduce), so its
    rows are a variant, and the table under the published heading says so."""
    sweep = tmp_path / "sweep"
    for job, engine in (("a", "yafsdp"), ("b", "fsdp1")):
        path = write_job(sweep, job, engine=engine)
        if engine == "fsdp1":
            result = json.loads(path.read_text())
            result["config"]["engine"]["reduce_dtype"] = "bf16"
            path.write_text(json.dumps(result))
    text = build_report([sweep], tmp_path / "out").read_text()
    section = text.split("### YaFSDP vs FSDP1")[1].split("\n## ")[0]
    assert "engine.reduce_dtype=bf16" in section
    assert "not FSDP1 as the heading describes it" in section
    assert "engine.reduce_dtype=bf16 (registered: fp32)" in section


def test_a_report_of_a_running_sweep_says_so_and_names_the_jobs_in_flight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    from harness.results.__main__ import main as results_main
    from harness.sweep.dirlock import acquire

    sweep = demo_sweep(tmp_path / "sweep")
    in_flight = sweep / "engine=fsdp1,rerun"
    in_flight.mkdir()
    (in_flight / "result.previous.1.json").write_text("{}")  # set aside by a rerun
    sweep_lock = acquire(sweep, what="sweep directory")
    job_lock = acquire(in_flight, what="job directory")
    try:
        text = build_report([sweep], tmp_path / "out").read_text()
        assert results_main([str(sweep)]) == 0
        assert "is running" in capsys.readouterr().out
    finally:
        job_lock.release()
        sweep_lock.release()
    head = text.split("\n## ")[0]
    assert "is running" in head and f"PID {os.getpid()}" in head, head
    assert "engine=fsdp1,rerun" in head and "partial" in head, head
    after = build_report([sweep], tmp_path / "out").read_text().split("\n## ")[0]
    assert "is running" not in after and "engine=fsdp1,rerun" not in after


def test_a_dead_runners_lock_record_is_not_a_running_sweep(tmp_path: Path) -> None:
    import subprocess
    import sys

    from harness.sweep.dirlock import LOCK_FILE

    sweep = demo_sweep(tmp_path / "sweep")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    record = {"pid": int(gone.stdout), "host": __import__("socket").gethostname(), "since": 1.0}
    (sweep / LOCK_FILE).write_text(json.dumps(record))
    head = build_report([sweep], tmp_path / "out").read_text().split("\n## ")[0]
    assert "is running" not in head


def test_the_aa_tables_twin_column_names_the_twin(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for job, label in (("a", "yafsdp"), ("b", "yafsdp_again")):
        path = write_job(sweep, job, engine="yafsdp")
        _set_config(path, engine={"name": "yafsdp", "label": label, "reduce_dtype": "fp32",
                                  "async_unshard": False, "options": {}})  # fmt: skip
    text = build_report([sweep], tmp_path / "out").read_text()
    section = text.split("### YaFSDP vs YaFSDP again, as `yafsdp_again`")[1].split("\n## ")[0]
    header = next(ln for ln in section.splitlines() if ln.startswith("| model"))
    assert "| yafsdp_again iteration time (s) |" in header and "| FSDP iteration" not in header


def test_a_buffer_plan_that_differs_between_yafsdp_jobs_is_a_variant(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for job, plan in (("0", "auto"), ("1", "half_staging")):
        path = write_job(sweep, job, engine="yafsdp")
        result = json.loads(path.read_text())
        result["config"]["engine"]["buffer_plan"] = plan
        path.write_text(json.dumps(result))
    write_job(sweep, "2", engine="fsdp1")
    text = build_report([sweep], tmp_path / "out").read_text()
    assert "runs; using" not in text, "a plan's job was taken for a repeat of another's"
    assert "engine.buffer_plan=half_staging" in text and "engine.buffer_plan=auto" in text
