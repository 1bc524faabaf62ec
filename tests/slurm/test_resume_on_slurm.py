"""Resuming a SLURM sweep on the local SLURM (see .ci/slurm-up.sh): a stored ok result of
another config is resubmitted, and a job an earlier submitter left running is adopted,
not submitted twice (issue 30: H1, M6)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness.jobdir.result import make_result, read_result, write_result
from tests.slurm.test_harness_on_slurm import ENV, REPO, TIMEOUTS, _command, _jobs, _slurm_job_id

pytestmark = pytest.mark.slurm


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=ENV, timeout=500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_a_stored_ok_result_of_another_config_is_resubmitted(
    slurm_cluster: None, tmp_path: Path
) -> None:
    cmd = _command(tmp_path, "gpus=2", "fault.kind=none", *TIMEOUTS)
    _run(cmd)
    (job_dir,) = _jobs(tmp_path).values()
    first_job = _slurm_job_id(job_dir)
    ok = read_result(job_dir / "result.json")
    # As if measured before the default lr changed: the same job, another config.
    write_result(job_dir, make_result(status="ok", config={**ok.config, "lr": 1.0}))
    proc = _run(cmd)
    assert (
        "rerunning: stored ok result was measured with another config" in proc.stdout + proc.stderr
    )
    assert _slurm_job_id(job_dir) != first_job
    rerun = read_result(job_dir / "result.json")
    assert rerun.ok and rerun.config["lr"] == ok.config["lr"]


def test_a_job_left_running_by_a_dead_submitter_is_adopted(
    slurm_cluster: None, tmp_path: Path
) -> None:
    # rank 1 hangs: the job runs until its collective timeout, long enough to resume into
    cmd = _command(tmp_path, "gpus=2", "fault.kind=hang", "collective_timeout_s=40")
    first = subprocess.Popen(cmd, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("*/ranks/phase")):  # submitted, and its ranks run
        assert first.poll() is None and time.monotonic() < deadline, "the job never started"
        time.sleep(0.5)
    first.send_signal(signal.SIGKILL)  # the submitter dies; its SLURM job runs on
    first.wait()
    (job_dir,) = {p.parent.parent for p in tmp_path.glob("*/ranks/phase")}
    slurm_id = _slurm_job_id(job_dir)
    assert json.loads((job_dir / "slurm.json").read_text())["state"] == "SUBMITTED"
    proc = _run(cmd)
    assert f"adopted SLURM job {slurm_id}" in proc.stdout + proc.stderr, proc.stdout[-3000:]
    assert _slurm_job_id(job_dir) == slurm_id  # not submitted again
    result = read_result(job_dir / "result.json")
    assert result.status == "timeout" and "waiting for ranks [1]" in (result.error or "")
    record = json.loads((job_dir / "slurm.json").read_text())
    assert record["state"] != "SUBMITTED"  # this submitter saw it end
