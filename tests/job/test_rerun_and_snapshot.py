"""`rerun=true` re-measures an ok job in its own directory (the old result set aside, as
resume does); `memory_snapshot=true` dumps the CUDA allocator's snapshot and is refused
on CPU before any rank starts."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch

import harness.job.launch as launch
from harness.config import JobConfig
from harness.job.run import run_job
from harness.jobdir.paths import JobDir
from harness.jobdir.result import make_result, write_result
from harness.validate import validation_errors
from tests.cuda_fakes import fake_cuda


def _ok(cfg: JobConfig, t: float) -> object:
    return make_result(status="ok", config=asdict(cfg), metrics={"iteration_time_s": t})


@pytest.fixture()
def measured_again(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """launch_local stood in for: it 'measures' 0.2 s/step and records where it ran."""
    ran: list[Path] = []

    def fake_launch(cfg: JobConfig, job_dir: Path, on_poll: object = None) -> tuple[int, bool]:
        ran.append(job_dir)
        write_result(job_dir, _ok(cfg, 0.2))  # type: ignore[arg-type]
        return 0, False

    monkeypatch.setattr(launch, "launch_local", fake_launch)
    return ran


def test_rerun_remeasures_an_ok_job_keeping_the_old_result(tmp_path, measured_again) -> None:
    cfg = JobConfig(device="cpu", gpus=2)
    write_result(tmp_path, _ok(cfg, 0.1))  # type: ignore[arg-type]
    (tmp_path / "keep.txt").write_text("the directory is not deleted")
    said: list[str] = []
    outcome = run_job(cfg, tmp_path, say=said.append)
    assert not outcome.ran and measured_again == []  # without rerun the ok result stands
    cfg.rerun = True
    outcome = run_job(cfg, tmp_path, say=said.append)
    assert outcome.ran and measured_again == [tmp_path]
    assert outcome.result.metrics.iteration_time_s == 0.2
    (kept,) = JobDir(tmp_path).previous_results()  # set aside, numbered, never overwritten
    previous = json.loads(kept.read_text())
    assert previous["metrics"]["iteration_time_s"] == 0.1
    assert (tmp_path / "keep.txt").exists()
    assert any("rerun=true" in s for s in said)


def test_rerun_is_not_part_of_the_job_directory_name() -> None:
    config = (Path(__file__).parents[2] / "sweeps" / "config.yaml").read_text()
    assert "rerun," in config.split("exclude_keys:")[1].splitlines()[0]


def test_memory_snapshot_is_refused_on_cpu_before_launch(tmp_path, measured_again) -> None:
    cfg = JobConfig(device="cpu", gpus=2, memory_snapshot=True)
    (error,) = validation_errors(cfg)
    assert "memory_snapshot=true" in error and "CUDA" in error
    if not torch.cuda.is_available():  # device=auto resolves to CPU here
        outcome = run_job(JobConfig(gpus=2, memory_snapshot=True), tmp_path)
        assert outcome.result.status == "invalid" and measured_again == []
        assert "memory_snapshot" in (outcome.result.error or "")


def test_the_snapshot_records_the_allocator_history_around_its_steps(monkeypatch, tmp_path):
    from harness.rank import memory_snapshot

    calls: list[tuple] = []
    memory = torch.cuda.memory
    fake_cuda(monkeypatch, "_record_memory_history", module=memory,
              side_effect=lambda *a, **k: calls.append(("record", a, k)))  # fmt: skip
    fake_cuda(monkeypatch, "_dump_snapshot", module=memory,
              side_effect=lambda filename: calls.append(("dump", filename)))  # fmt: skip
    fake_cuda(monkeypatch, "synchronize", None)
    steps: list[int] = []
    out = memory_snapshot.snapshot_path(tmp_path, 1)
    assert (
        memory_snapshot.record_snapshot(lambda: steps.append(1), torch.device("cpu"), out) is None
    )
    got = memory_snapshot.record_snapshot(lambda: steps.append(1), torch.device("cuda", 0), out)
    assert got == tmp_path / "memory_snapshot" / "rank1.pickle"
    assert len(steps) == memory_snapshot.STEPS
    assert [c[0] for c in calls] == ["record", "dump", "record"]
    assert calls[0][2] == {"max_entries": memory_snapshot.MAX_ENTRIES}
    assert calls[1][1] == str(got) and calls[2][2] == {"enabled": None}


def _start_sweep(sweep: Path, *overrides: str) -> Any:
    """The sweep callback's start, on the config Hydra composes for these overrides."""
    from hydra import compose, initialize_config_dir

    import harness.cli  # noqa: F401  (the config schema and the resolvers)
    from harness.sweep.callbacks import AggregateResults

    sweeps_dir = Path(__file__).parents[2] / "sweeps"
    with initialize_config_dir(config_dir=str(sweeps_dir), version_base="1.3"):
        config = compose("config", overrides=[*overrides, f"hydra.sweep.dir={sweep}"],
                         return_hydra_config=True)  # fmt: skip
    AggregateResults().on_multirun_start(config)
    return config


def test_a_rerun_sweep_resumed_keeps_what_it_measured_since_it_began(
    tmp_path, measured_again, monkeypatch, capsys
) -> None:
    import os
    import signal
    import time

    from harness import cli
    from harness.sweep import callbacks
    from harness.sweep.callbacks import AggregateResults

    sweep, cfg = tmp_path / "sweep", JobConfig(device="cpu", gpus=2, rerun=True)
    before, since = sweep / "before", sweep / "since"
    sweep.mkdir()
    write_result(before, _ok(cfg, 0.1))  # type: ignore[arg-type]
    old = time.time() - 3600
    os.utime(before / "result.json", (old, old))  # measured before this rerun began
    _start_sweep(sweep, "rerun=true")
    run_job(cfg, since, say=print)  # this rerun measures a job, then is interrupted
    assert measured_again == [since]
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # the interrupt's own handlers
    monkeypatch.setattr(cli.sys, "argv", ["harness", "-m", "rerun=true"])
    cli._after_interrupt("SIGINT")
    hint = capsys.readouterr().err
    monkeypatch.setattr(callbacks, "_active", None)
    assert "rerun=true" in hint and "stand" in hint, hint  # the same command resumes
    config = _start_sweep(sweep, "rerun=true")  # the resume
    for job in (since, before):
        run_job(cfg, job, say=print)
    assert measured_again == [since, before]  # what this rerun measured stands
    assert len(JobDir(since).previous_results()) == 0
    AggregateResults().on_multirun_end(config)  # the rerun is complete
    _start_sweep(sweep, "rerun=true")  # a new rerun re-measures everything
    run_job(cfg, since, say=print)
    assert measured_again == [since, before, since]
    AggregateResults().on_multirun_end(config)
