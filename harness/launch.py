"""Start a job's ranks on this machine with torch elastic, never retrying a failure.

`launch_local` runs the ranks in a child process group so that a job over its wall-clock
limit can be killed whole; the child (`python -m harness.launch <job_dir>`) runs elastic
launch with a c10d rendezvous on a free local port and `max_restarts=0`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from dataclasses import asdict
from pathlib import Path

from harness.config import JobConfig, config_from_dict

JOB_CONFIG_FILE = "job_config.json"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_local(cfg: JobConfig, job_dir: Path) -> tuple[int | None, bool]:
    """Run all ranks; return (exit code, timed_out). Ranks record their own outcomes."""
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / JOB_CONFIG_FILE).write_text(json.dumps(asdict(cfg), indent=2))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "TORCHELASTIC_"))}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.launch", str(job_dir)], start_new_session=True, env=env
    )
    try:
        return proc.wait(timeout=cfg.job_timeout_s), False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return proc.returncode, True


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _rank_entry(cfg_dict: dict, job_dir: str) -> None:
    from harness.worker import run_rank

    run_rank(config_from_dict(cfg_dict), Path(job_dir))


def _elastic_main(job_dir: Path) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    cfg_dict = json.loads((job_dir / JOB_CONFIG_FILE).read_text())
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
    except ChildFailedError:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_elastic_main(Path(sys.argv[1])))
