"""One writer per job directory, and no runner in a directory it cannot lock (issue 30:
M3, M4)."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import harness.sweep.dirlock as dirlock
from harness.jobdir.result import read_result
from harness.sweep.callbacks import AggregateResults
from harness.sweep.dirlock import LOCK_FILE
from tests.processes import REPO, run_module

B = ("model=llama_tiny", "steps=2", "warmup_steps=1", "profile.steps=0", "seq_len=32")


def _another_users_lock_file(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    """The lock file exists and opening it is refused, as for a file of another user with
    mode 0644 (simulated: the tests may run as root, whom no mode stops)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / LOCK_FILE).write_text("")
    real_open = os.open

    def refusing_open(path, flags, *args):  # type: ignore[no-untyped-def]
        if Path(path).name == LOCK_FILE:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(dirlock.os, "open", refusing_open)


def test_an_unopenable_lock_file_refuses_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _another_users_lock_file(monkeypatch, tmp_path)
    config = OmegaConf.create(
        {"hydra": {"sweep": {"dir": str(tmp_path)}, "overrides": {"task": []}}, "dry_run": False}
    )
    with pytest.raises(SystemExit) as refused:  # Hydra turns a callback's error into a warning
        AggregateResults().on_multirun_start(config)
    assert refused.value.code == 3
    err = capsys.readouterr().err
    assert f"cannot open the lock file {tmp_path / LOCK_FILE}" in err
    assert "another user's runner" in err and "hydra.sweep.dir=" in err


def _hold(directory: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from harness.sweep.dirlock import acquire; acquire(sys.argv[1]); "
            "print('locked', flush=True); time.sleep(120)",
            str(directory),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder


@pytest.mark.slow
def test_a_sweeps_job_whose_directory_another_runner_holds_is_not_run(tmp_path: Path) -> None:
    overrides = (*B[:-1], "seq_len=4096")  # refused before launch: no rank would start
    job_dir = tmp_path / ",".join(sorted(overrides))  # the job directory Hydra names
    holder = _hold(job_dir)
    try:
        proc = run_module("harness", "-m", *overrides, f"hydra.sweep.dir={tmp_path}", timeout=300)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "failed: not run: job directory " in proc.stdout  # its path ends the line short
    assert not (job_dir / "result.json").exists(), "the holder's directory was written"


@pytest.mark.slow
def test_a_single_run_into_a_running_sweeps_job_directory_is_refused(tmp_path: Path) -> None:
    sweep = subprocess.Popen(
        [sys.executable, "-m", "harness", "-m", *B, "gpus=2", f"hydra.sweep.dir={tmp_path}"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not list(tmp_path.glob("*/ranks/phase")):  # the sweep's job runs its ranks
            assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()
            time.sleep(0.2)
        (job_dir,) = {p.parent.parent for p in tmp_path.glob("*/ranks/phase")}
        single = run_module("harness", *B, "gpus=2", f"hydra.run.dir='{job_dir}'", timeout=300)
        assert single.returncode == 3, single.stdout[-2000:] + single.stderr[-2000:]
        host = socket.gethostname()
        assert f"job directory {job_dir} is in use by PID {sweep.pid} on host {host}" in (
            single.stderr
        )
        out, err = sweep.communicate(timeout=600)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode == 0, out[-2000:] + err[-2000:]
    assert read_result(job_dir / "result.json").ok
