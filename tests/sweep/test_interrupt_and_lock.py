"""Real 2-rank sweeps: Ctrl-C ends every process of the job and resume completes it; a
second runner into a sweep directory in use is refused at once."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from harness.sweep.dirlock import LOCK_FILE
from tests.processes import REPO, signal_masks, stop_signals_reach_children
from tests.sweep.test_local_sweep import TINY, multirun, rows

GRID = ("engine=local,fsdp2",)


def start_sweep(sweep_dir: Path, *grid: str) -> subprocess.Popen:
    """The tiny sweep (of two jobs unless `grid` says otherwise), started as from a terminal:
    Ctrl-C and SIGHUP reach it."""
    grid = grid or GRID
    with stop_signals_reach_children():
        return subprocess.Popen(
            [sys.executable, "-m", "harness", "-m", *TINY, *grid, f"hydra.sweep.dir={sweep_dir}"],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def _is_rank(p: psutil.Process) -> bool:
    try:
        return "spawn_main" in " ".join(p.cmdline())
    except psutil.Error:
        return False


def wait_for_ranks(
    runner: subprocess.Popen, n: int, timeout_s: float = 300
) -> list[psutil.Process]:
    """Every process the runner started, once `n` rank processes run."""
    me = psutil.Process(runner.pid)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        family = me.children(recursive=True)
        if sum(_is_rank(p) for p in family) >= n:
            return family
        assert runner.poll() is None, runner.communicate()
        time.sleep(0.2)
    raise AssertionError("the ranks never started")


def test_interrupt_ends_the_job_whole_and_resume_completes_it(tmp_path: Path) -> None:
    runner = start_sweep(tmp_path)
    family = wait_for_ranks(runner, 2)
    time.sleep(1.0)
    masks = signal_masks(runner.pid)
    runner.send_signal(signal.SIGINT)
    out, err = runner.communicate(timeout=60)
    assert runner.returncode == 130, f"{masks}\n{out[-2000:]}{err[-3000:]}"
    _, alive = psutil.wait_procs(family, timeout=5)
    assert not alive, f"left running: {alive}"
    assert "Traceback" not in out + err, "no traceback of the runner, agent or ranks"
    assert "sweep interrupted (SIGINT) after 0 of 2 jobs" in out
    assert err.strip().splitlines()[-1].startswith("[harness] interrupted (SIGINT)")
    assert "resume with the same command" in err
    statuses = {
        p.parent.name: json.loads(p.read_text())["status"] for p in tmp_path.glob("*/result.json")
    }
    assert list(statuses.values()) == ["interrupted"], statuses
    assert [r["status"] for r in rows(tmp_path)] == ["interrupted"]
    # Nothing writes into the sweep after the runner has gone.
    stamp = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    time.sleep(3)
    assert stamp == {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}

    proc = multirun(*TINY, *GRID, sweep_dir=tmp_path)
    assert "rerunning: previous attempt ended interrupted" in proc.stdout
    assert sorted(r["status"] for r in rows(tmp_path)) == ["ok", "ok"]


def test_a_second_runner_into_a_sweep_in_use_is_refused(tmp_path: Path) -> None:
    first = start_sweep(tmp_path, "engine=local")  # one job: the lock is the sweep's
    lock = tmp_path / LOCK_FILE
    deadline = time.monotonic() + 120
    while not (lock.exists() and lock.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    started = time.monotonic()
    second = start_sweep(tmp_path, "engine=local")
    out, err = second.communicate(timeout=120)
    assert second.returncode == 3, out + err
    assert f"PID {first.pid} on host {socket.gethostname()}" in err
    assert time.monotonic() - started < 60
    # The first runner is untouched by the attempt and finishes its jobs.
    out, err = first.communicate(timeout=900)
    assert first.returncode == 0, out[-2000:] + err[-3000:]
    assert [r["status"] for r in rows(tmp_path)] == ["ok"]
