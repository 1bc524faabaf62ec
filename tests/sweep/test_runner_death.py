"""Nothing of a job outlives its runner: SIGHUP is an interrupt, a killed runner takes its
ranks with it, and a rerun ends what an earlier attempt left running (issue 30, M5)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.sweep.test_interrupt_and_lock import start_sweep, wait_for_ranks


def _end(family: list[psutil.Process]) -> None:
    for p in family:
        try:
            p.kill()
        except psutil.Error:
            pass


@pytest.mark.slow
def test_sighup_is_an_interrupt_that_ends_the_job_whole(tmp_path: Path) -> None:
    runner = start_sweep(tmp_path)
    family = wait_for_ranks(runner, 2)
    try:
        runner.send_signal(signal.SIGHUP)  # the terminal was closed
        out, err = runner.communicate(timeout=60)
        assert runner.returncode == 130, out[-2000:] + err[-3000:]
        _, alive = psutil.wait_procs(family, timeout=10)
        assert not alive, f"left running: {alive}"
    finally:
        _end(family)
    assert "interrupted (SIGHUP)" in err
    statuses = [json.loads(p.read_text())["status"] for p in tmp_path.glob("*/result.json")]
    assert statuses == ["interrupted"]


@pytest.mark.slow
def test_the_ranks_die_with_a_killed_runner(tmp_path: Path) -> None:
    runner = start_sweep(tmp_path)
    family = wait_for_ranks(runner, 2)
    try:
        runner.kill()
        runner.communicate(timeout=30)
        _, alive = psutil.wait_procs(family, timeout=20)
        assert not alive, f"the runner's ranks ran on without it: {alive}"
    finally:
        _end(family)


def test_a_rerun_ends_an_earlier_attempt_still_running(tmp_path: Path) -> None:
    from harness.job.strays import ATTEMPT_FILE, end_stray_attempt

    # A process group left by a runner that died: it looks like torch's spawned ranks.
    stray = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)  # spawn_main"],
        start_new_session=True,
    )
    try:
        record = {"pgid": stray.pid, "host": socket.gethostname(), "runner_pid": 1}
        (tmp_path / ATTEMPT_FILE).write_text(json.dumps(record))
        said = end_stray_attempt(tmp_path)
        assert said is not None and f"process group {stray.pid}" in said
        assert stray.wait(timeout=10) == -signal.SIGKILL
        assert not (tmp_path / ATTEMPT_FILE).exists()
        assert end_stray_attempt(tmp_path) is None  # nothing left: nothing to say
    finally:
        stray.kill()
        stray.wait()


def test_an_unrelated_process_group_is_left_alone(tmp_path: Path) -> None:
    from harness.job.strays import ATTEMPT_FILE, end_stray_attempt

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        record = {"pgid": other.pid, "host": socket.gethostname(), "runner_pid": 1}
        (tmp_path / ATTEMPT_FILE).write_text(json.dumps(record))
        assert end_stray_attempt(tmp_path) is None
        time.sleep(0.2)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
