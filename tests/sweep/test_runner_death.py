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


def _launcher_like(job_dir: Path) -> subprocess.Popen:
    """A process group led by what looks like this job's rank launcher (its command line
    names the module and the job directory, as `python -m harness.job.launch <dir>`)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "harness.job.launch", str(job_dir)],
        start_new_session=True,
    )
    # Popen can return while the kernel still sets the new program up: its command line
    # reads empty for that moment (seen under load). A launcher a rerun finds has long run.
    deadline = time.monotonic() + 30
    while b"harness.job.launch" not in _cmdline(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _record(job_dir: Path, pgid: int, **fields: object) -> None:
    from harness.job.strays import ATTEMPT_FILE

    record = {"pgid": pgid, "host": socket.gethostname(), "runner_pid": 1, **fields}
    (job_dir / ATTEMPT_FILE).write_text(json.dumps(record))


def _boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _seen(stray: subprocess.Popen, recorded: str) -> str:
    """What the stray check saw: the record, and the recorded leader as it is now."""
    try:
        stat = Path(f"/proc/{stray.pid}/stat").read_text()
    except OSError as e:
        stat = f"unreadable: {e}"
    cmdline = _cmdline(stray.pid)
    return f"exit code {stray.poll()}; recorded {recorded}; now stat {stat!r}, cmdline {cmdline!r}"


def _stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def test_a_rerun_ends_an_earlier_attempt_still_running(tmp_path: Path) -> None:
    from harness.job.strays import ATTEMPT_FILE, end_stray_attempt, record_attempt

    stray = _launcher_like(tmp_path)  # left by a runner that died
    try:
        record_attempt(tmp_path, stray.pid)
        recorded = (tmp_path / ATTEMPT_FILE).read_text()
        said = end_stray_attempt(tmp_path)
        assert said is not None and f"process group {stray.pid}" in said, _seen(stray, recorded)
        assert stray.wait(timeout=10) == -signal.SIGKILL
        assert not (tmp_path / ATTEMPT_FILE).exists()
        assert end_stray_attempt(tmp_path) is None  # nothing left: nothing to say
    finally:
        _stop(stray)


def test_an_unrelated_process_group_is_left_alone(tmp_path: Path) -> None:
    from harness.job.strays import end_stray_attempt

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        _record(tmp_path, other.pid)
        assert end_stray_attempt(tmp_path) is None
        time.sleep(0.2)
        assert other.poll() is None
    finally:
        _stop(other)


def test_a_reused_pid_is_left_alone_though_its_command_line_fits(tmp_path: Path) -> None:
    """A stale attempt.json (its runner SIGKILLed) whose PID now leads another group, one
    that even looks like a launcher of this job: its start time is not the recorded one."""
    from harness.job.strays import end_stray_attempt

    other = _launcher_like(tmp_path)
    try:
        # clock ticks since boot: the process that held the PID then is long gone
        _record(tmp_path, other.pid, leader_start=1, boot_id=_boot_id())
        assert end_stray_attempt(tmp_path) is None
        _record(tmp_path, other.pid)  # an older attempt.json: no start time, no proof
        assert end_stray_attempt(tmp_path) is None
        time.sleep(0.2)
        assert other.poll() is None
    finally:
        _stop(other)


def test_a_spawned_worker_of_another_job_is_left_alone(tmp_path: Path) -> None:
    """Every multiprocessing spawn worker says `spawn_main`: that is no proof of this job."""
    from harness.job.strays import end_stray_attempt, record_attempt

    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)  # spawn_main"],
        start_new_session=True,
    )
    try:
        record_attempt(tmp_path, other.pid)  # its start time fits: its command line does not
        assert end_stray_attempt(tmp_path) is None
        _record(tmp_path, other.pid)
        assert end_stray_attempt(tmp_path) is None
        time.sleep(0.2)
        assert other.poll() is None
    finally:
        _stop(other)


def test_a_skipped_job_looks_for_no_stray(tmp_path: Path, monkeypatch) -> None:
    from dataclasses import asdict

    from harness.config import JobConfig
    from harness.job import run
    from harness.jobdir.result import make_result, write_result

    cfg = JobConfig(device="cpu", gpus=1)
    write_result(tmp_path, make_result(status="ok", config=asdict(cfg)))

    def must_not_run(job_dir: Path) -> None:
        raise AssertionError("end_stray_attempt ran for a job whose ok result stands")

    monkeypatch.setattr(run, "end_stray_attempt", must_not_run)
    outcome = run.run_job(cfg, tmp_path, say=lambda line: None)
    assert outcome.result.ok and not outcome.ran
