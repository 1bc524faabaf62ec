"""A sweep never lies: job identity, resume, locks, rank deaths, damaged results, refusals.

Fast checks without ranks; the runs with real ranks are in tests/sweep/test_interrupt_and_lock.py.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from harness.config import EngineConfig, JobConfig
from harness.job.resume import rerun_reason
from harness.job.run import decide_result
from harness.jobdir.result import CorruptResultError, make_result, read_result, write_result
from harness.sweep.dirlock import LOCK_FILE, DirectoryLocked, acquire
from harness.validate import unknown_field_errors, validation_errors
from tests.processes import REPO, run_module


def run_harness(*args: str) -> subprocess.CompletedProcess:
    return run_module(*args, timeout=300)


# 1. Job identity ---------------------------------------------------------------------------


def test_resume_reruns_when_the_stored_config_differs(tmp_path: Path) -> None:
    stored = asdict(JobConfig(device="cpu"))
    write_result(tmp_path, make_result(status="ok", config=stored, metrics={}))
    assert rerun_reason(tmp_path, stored) is None
    # Fields that cannot change a measurement do not force a rerun...
    assert rerun_reason(tmp_path, {**stored, "job_timeout_s": 5.0, "dry_run": True}) is None
    # ...any other does, and the reason names it.
    reason = rerun_reason(tmp_path, asdict(JobConfig(device="cuda", device_memory_gb=80)))
    assert reason is not None and "device: 'cpu' -> 'cuda'" in reason
    assert "device_memory_gb" in reason
    nested = asdict(JobConfig(device="cpu", engine=EngineConfig(reduce_dtype="bf16")))
    assert "engine.reduce_dtype" in (rerun_reason(tmp_path, nested) or "")


def test_every_swept_field_gets_its_own_job_directory_and_a_dry_run_writes_nothing(
    tmp_path: Path,
) -> None:
    sweep = tmp_path / "sweep"
    # the a100 jobs are refused by this CPU machine (a dry run checks what the run would)
    proc = run_harness(
        "harness", "-m", "hardware=cpu,a100_80gb", "dry_run=true", "allow_failures=true",
        f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    dirs = [
        line.split(" -> ")[1].split(" [")[0] for line in proc.stdout.splitlines() if " -> " in line
    ]
    assert len(dirs) == 2 and len(set(dirs)) == 2, proc.stdout
    assert not sweep.exists(), "a dry run must create no directory"
    assert "never finished" not in proc.stdout + proc.stderr


# 2. One runner per directory ---------------------------------------------------------------


def test_a_second_runner_is_refused_naming_the_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from harness.sweep.dirlock import acquire; acquire(sys.argv[1]); "
            "print('locked', flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(DirectoryLocked) as refused:
            acquire(tmp_path, what="sweep directory")
        assert f"PID {holder.pid} on host {socket.gethostname()}" in str(refused.value)
    finally:
        holder.kill()
        holder.wait()
    # The holder died holding it: the next runner takes it over and says from whom.
    lock = acquire(tmp_path)
    assert lock.taken_over is not None and lock.taken_over["pid"] == holder.pid
    lock.release()
    assert acquire(tmp_path).taken_over is None  # a clean release leaves nothing stale
    assert (tmp_path / LOCK_FILE).exists()


# 4. A rank killed without an outcome is named -------------------------------------------------


def test_a_killed_rank_is_the_cause_not_the_peer_that_lost_it(tmp_path: Path) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "rank0.json").write_text(
        json.dumps(
            {
                "rank": 0,
                "time": time.time(),
                "status": "failed",
                "error": "DistBackendError: [../gloo/transport/tcp/pair.cc:534] Read error "
                "[127.0.0.1]:1234: Connection reset by peer",
            }
        )
    )
    (ranks / "exits.json").write_text(json.dumps({"1": {"exitcode": -9, "time": time.time()}}))
    result = decide_result(JobConfig(gpus=2), tmp_path, exit_code=1, timed_out=False)
    assert result.status == "failed"
    assert result.error.startswith("rank 1 was killed (SIGKILL)"), result.error


def test_a_silent_rank_is_named_when_its_exit_is_unknown(tmp_path: Path) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "rank0.json").write_text(
        json.dumps({"rank": 0, "time": 1.0, "status": "failed", "error": "Broken pipe"})
    )
    result = decide_result(JobConfig(gpus=2), tmp_path, exit_code=1, timed_out=False)
    assert result.error.startswith("rank 1 ended without recording an outcome")


# 5. A damaged result is a problem, not a crash -----------------------------------------------


@pytest.mark.parametrize(
    ("field", "bad"),
    [("losses", "abc"), ("iteration_time_s", "fast"), ("step_times_s", [1.0, "x"])],
)
def test_a_result_with_wrong_types_is_refused_on_reading(
    tmp_path: Path, field: str, bad: object
) -> None:
    write_result(
        tmp_path,
        make_result(status="ok", config={}, metrics={"iteration_time_s": 1.0, field: bad}),
    )
    with pytest.raises(CorruptResultError, match=f"metrics.{field}="):
        read_result(tmp_path / "result.json")


# 6. Result files are as readable as any other file -------------------------------------------


def test_result_files_get_the_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = write_result(tmp_path, make_result(status="ok", config={}))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


# 8. Refusals before any process starts ---------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field", "fix"),
    [
        ({"seq_len": 2048}, "seq_len=2048", "seq_len<=1024"),
        ({"threads_per_rank": -1}, "threads_per_rank=-1", "0 (cores / ranks) or more"),
        ({"job_timeout_s": 0.0}, "job_timeout_s=0.0", "more than 0"),
        ({"collective_timeout_s": -1.0}, "collective_timeout_s=-1.0", "more than 0"),
    ],
)
def test_impossible_values_are_refused(overrides: dict, field: str, fix: str) -> None:
    errors = validation_errors(JobConfig(**overrides))
    assert any(field in e and fix in e for e in errors), errors


def test_a_field_typo_is_refused_with_the_likely_field() -> None:
    values = asdict(JobConfig())
    assert unknown_field_errors(values) == []
    (error,) = unknown_field_errors({**values, "seqlen": 512})
    assert "seqlen" in error and "seq_len" in error
    (error,) = unknown_field_errors({**values, "engine": {**values["engine"], "labl": "x"}})
    assert error.startswith("engine.labl") and "label" in error


def test_gpu_refusals_offer_a_possible_fix() -> None:
    (no_gpu,) = validation_errors(JobConfig(device="cuda"), local_devices=0)
    assert "gpus<=0" not in no_gpu and "hardware=cpu" in no_gpu
    local = JobConfig(model="llama2_70b", gpus=2, device_memory_gb=80)  # engine local
    (fit,) = validation_errors(local)
    assert "gpus>=" not in fit and "engine=local" in fit and "yafsdp" in fit


# 9. Commands on directories that are not sweeps ------------------------------------------------


def test_results_and_report_refuse_what_is_not_a_sweep(tmp_path: Path) -> None:
    missing = run_harness("harness.results", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    for module in ("harness.results", "harness.report"):
        proc = run_harness(module, str(empty))
        assert proc.returncode == 2 and "holds no job results" in proc.stderr, module
        assert not list(empty.iterdir()), f"{module} wrote into an unrelated directory"
    sweep = tmp_path / "sweep"
    write_result(sweep / "job", make_result(status="invalid", config={}, error="x"))
    sweep.chmod(0o555)
    try:
        if os.access(sweep, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        proc = run_harness("harness.results", str(sweep))
        assert proc.returncode == 2 and "not writable" in proc.stderr
        assert "Traceback" not in proc.stderr
    finally:
        sweep.chmod(0o755)


def _start_sweep_in(sweep: Path) -> None:
    """The sweep callback's start for `hydra.sweep.dir=<sweep>`, and its end."""
    from hydra import compose, initialize_config_dir

    import harness.cli  # noqa: F401  (the config schema and the resolvers)
    from harness.sweep.callbacks import AggregateResults

    with initialize_config_dir(config_dir=str(REPO / "sweeps"), version_base="1.3"):
        config = compose("config", overrides=[f"hydra.sweep.dir={sweep}"],
                         return_hydra_config=True)  # fmt: skip
    AggregateResults().on_multirun_start(config)
    AggregateResults().on_multirun_end(config)


def test_a_sweep_nested_in_a_running_one_or_holding_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.sweep.callbacks import EXIT_LOCKED

    outer, inner = tmp_path / "outer", tmp_path / "outer" / "inner"
    running = acquire(outer, what="sweep directory")  # a live runner's sweep
    try:
        with pytest.raises(SystemExit) as refused:
            _start_sweep_in(inner)
        assert refused.value.code == EXIT_LOCKED
        err = capsys.readouterr().err
        assert str(outer) in err and f"PID {os.getpid()}" in err, err
    finally:
        running.release()
    _start_sweep_in(inner)  # once the outer one ended
    (inner / "multirun.yaml").write_text("{}")  # what Hydra leaves in a sweep directory
    running = acquire(inner, what="sweep directory")
    try:
        with pytest.raises(SystemExit) as refused:
            _start_sweep_in(outer)
        assert refused.value.code == EXIT_LOCKED and str(inner) in capsys.readouterr().err
    finally:
        running.release()
    _start_sweep_in(outer)
