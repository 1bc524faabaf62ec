"""Start a job's ranks on this machine with torch elastic, never retrying a failure.

`launch_local` runs the ranks in a child process group so that a job over its wall-clock
limit, or one whose runner is interrupted, can be ended whole; the child
(`python -m harness.job.launch <job_dir>`) runs elastic launch with a c10d rendezvous on a free
local port and `max_restarts=0`.

Nothing the job prints reaches the console: the elastic agent writes to
`ranks/launcher.log` (its tracebacks on an interrupt included), and each rank points its
file descriptors 1 and 2 at `ranks/rank<r>.log`, so C++ output such as Kineto's lands
there too. How ranks ended that died without recording an outcome is kept in `ranks/exits.json`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from harness.config import JobConfig, config_from_dict
from harness.job.strays import RUNNER_PID_ENV, die_with_runner, forget_attempt, record_attempt
from harness.jobdir.paths import JobDir
from harness.ports import free_port

POLL_S = 0.25
TIMEOUT_GRACE_S = 10.0  # a job over its limit: time for the ranks to end themselves
INTERRUPT_GRACE_S = 3.0  # a person pressed Ctrl-C: end everything within seconds


def launch_local(
    cfg: JobConfig, job_dir: Path, *, on_poll: Callable[[], None] | None = None
) -> tuple[int | None, bool]:
    """Run all ranks; return (exit code, timed_out). Ranks record their own outcomes.

    `on_poll` is called a few times a second while the ranks run (progress display). An
    interrupt (KeyboardInterrupt or any exception) ends the whole process group, then
    propagates.
    """
    paths = JobDir(job_dir)
    paths.ranks.mkdir(parents=True, exist_ok=True)
    paths.job_config.write_text(json.dumps(asdict(cfg), indent=2))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "TORCHELASTIC_"))}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    env[RUNNER_PID_ENV] = str(os.getpid())  # the launcher dies with this runner
    with open(paths.launcher_log, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.job.launch", str(job_dir)],
            start_new_session=True,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    record_attempt(job_dir, proc.pid)  # it leads its own group: pgid == pid
    deadline = time.monotonic() + cfg.job_timeout_s
    try:
        while True:
            try:
                code = proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    _end_group(proc, TIMEOUT_GRACE_S)
                    forget_attempt(job_dir)
                    return proc.returncode, True
                if on_poll is not None:
                    on_poll()
    except BaseException:
        _end_group(proc, INTERRUPT_GRACE_S)
        forget_attempt(job_dir)
        raise
    _end_group(proc, 0.0)  # nothing of the job outlives it (stray helpers included)
    forget_attempt(job_dir)
    return code, False


def _end_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the job's process group, give it `grace_s`, then SIGKILL whatever is left.

    The group outlives its leader while any member lives, so the SIGKILL also reaches
    ranks whose elastic agent has already gone.
    """
    with interrupts_deferred():  # a second Ctrl-C must not leave the ranks running
        if grace_s > 0 and proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ignore SIGINT, SIGTERM and SIGHUP inside (main thread only): for clean-up a second
    Ctrl-C must not cut short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in stops}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def redirect_output(path: Path) -> None:
    """Point this process's fds 1 and 2 at `path`: Python, C++ and child output alike."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a crash loses no line


def _rank_entry(cfg_dict: dict, job_dir: str) -> None:
    redirect_output(JobDir(job_dir).rank_log(int(os.environ["RANK"])))
    from harness.rank.run import run_rank

    run_rank(config_from_dict(cfg_dict), Path(job_dir))


def _record_exits(job_dir: Path, failures: dict) -> None:
    """Exit code (negative: the signal) of each rank elastic saw fail first."""
    exits = {
        str(rank): {"exitcode": f.exitcode, "time": float(f.timestamp)}
        for rank, f in failures.items()
    }
    JobDir(job_dir).exits.write_text(json.dumps(exits))


def _elastic_main(job_dir: Path) -> int:
    die_with_runner()
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    cfg_dict = json.loads(JobDir(job_dir).job_config.read_text())
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=cfg_dict["gpus"],
        run_id=uuid.uuid4().hex[:12],
        rdzv_backend="c10d",
        rdzv_endpoint=f"127.0.0.1:{free_port()}",
        max_restarts=0,
        monitor_interval=0.2,
        start_method="spawn",
    )
    try:
        elastic_launch(config, _rank_entry)(cfg_dict, str(job_dir))
    except ChildFailedError as e:
        _record_exits(job_dir, e.failures)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_elastic_main(Path(sys.argv[1])))
