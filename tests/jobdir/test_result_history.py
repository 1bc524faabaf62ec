"""Reruns set results aside and never lose one (issue 30, M9)."""

from __future__ import annotations

from pathlib import Path

from harness.jobdir.paths import JobDir
from harness.jobdir.result import make_result, read_result, write_result


def test_an_ok_result_survives_two_failed_reruns(tmp_path: Path) -> None:
    job = JobDir(tmp_path)
    write_result(tmp_path, make_result(status="ok", config={"lr": 1}, metrics={"mfu": 0.5}))
    for attempt in ("failed", "timeout"):
        job.set_aside_result()  # what a rerun does before it runs
        write_result(tmp_path, make_result(status=attempt, config={"lr": 1}, error=attempt))
    job.set_aside_result()
    kept = {p.name: read_result(p).status for p in tmp_path.glob("result.previous*.json")}
    assert sorted(kept.values()) == ["failed", "ok", "timeout"], kept  # none overwritten
    assert [read_result(p).status for p in job.previous_results()] == ["ok", "failed", "timeout"]
    assert read_result(job.previous_results()[0]).metrics.mfu == 0.5
    assert not job.result.exists()


def test_a_one_slot_previous_result_of_an_older_version_is_kept(tmp_path: Path) -> None:
    job = JobDir(tmp_path)
    write_result(tmp_path, make_result(status="ok", config={}))
    job.result.rename(job.previous_result)  # result.previous.json, as older versions left it
    write_result(tmp_path, make_result(status="failed", config={}, error="x"))
    assert job.set_aside_result() == tmp_path / "result.previous.2.json"
    assert [read_result(p).status for p in job.previous_results()] == ["ok", "failed"]


def test_a_result_records_when_it_ran_and_in_which_round(tmp_path: Path, monkeypatch) -> None:
    """UTC start and end times and the round (the runner invocation) in result.json, so a
    reader can tell runs that ran together from those of a resume days later."""
    import json
    from datetime import datetime, timedelta

    from harness.config import JobConfig
    from harness.job.run import run_job

    monkeypatch.setenv("YAFSDP_BENCH_ROUND", "2026-11-28T10:00:00+00:00 host:1")
    before = datetime.now().astimezone()
    outcome = run_job(JobConfig(gpus=0, device="cpu"), tmp_path, say=lambda line: None)
    assert outcome.ran and outcome.result.status == "invalid"
    stored = json.loads((tmp_path / "result.json").read_text())
    started = datetime.fromisoformat(stored["started_at"])
    ended = datetime.fromisoformat(stored["ended_at"])
    assert started.utcoffset() == timedelta(0)  # UTC
    assert before - timedelta(seconds=1) <= started <= ended <= datetime.now().astimezone()
    assert stored["round"] == "2026-11-28T10:00:00+00:00 host:1"
    assert read_result(tmp_path / "result.json").timing() == outcome.result.timing()
