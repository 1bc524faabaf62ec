"""`python -m harness -m hydra/launcher=slurm` on the local SLURM (see .ci/slurm-up.sh).

One multirun over gpus=1,2,3 x fault none/crash/hang: every SLURM job gets its own task
count, a raising rank and a hanging rank end as rows, configs that cannot work (gpus=3 on
nodes of 2, a fault on a rank that does not exist) are refused before submission, and
a re-run skips the ok jobs and resubmits the failed one.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.jobdir.result import Result, read_result
from tests.processes import stop_signals_reach_children

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
HAS_RESULTS_CSV = importlib.util.find_spec("harness.results.table") is not None
COMMON = [
    "model=llama_tiny",
    "gpus_per_node=2",
    "steps=2",
    "warmup_steps=1",
    "profile.steps=0",
    "fault.rank=1",
    "allow_failures=true",  # failed jobs are what these sweeps test: exit 0 with them
]
TIMEOUTS = ("collective_timeout_s=10", "job_timeout_s=120")


def _command(sweep_dir: Path, *overrides: str) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "-m",
        "hydra/launcher=slurm",
        "hydra.launcher.request_gpus=false",  # the test cluster has no GPU GRES
        f"hydra.sweep.dir={sweep_dir}",
        *COMMON,
        *overrides,
    ]
    if not HAS_RESULTS_CSV:  # aggregation lands separately; until then no callback
        cmd.append("~hydra.callbacks.aggregate_results")
    return cmd


ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _sweep(sweep_dir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    cmd = _command(sweep_dir, *overrides)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=ENV, timeout=500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def sweep(slurm_cluster: None, tmp_path_factory: pytest.TempPathFactory):
    sweep_dir = tmp_path_factory.mktemp("slurm_sweep")
    proc = _sweep(sweep_dir, "gpus=1,2,3", "fault.kind=none,crash,hang", *TIMEOUTS)
    return sweep_dir, proc.stdout + proc.stderr


def _jobs(sweep_dir: Path) -> dict[tuple[int, str], Path]:
    jobs = {}
    for path in sweep_dir.glob("*/result.json"):
        cfg = read_result(path).config
        jobs[(cfg["gpus"], cfg["fault"]["kind"])] = path.parent
    return jobs


def _result(sweep_dir: Path, gpus: int, fault: str) -> Result:
    return read_result(_jobs(sweep_dir)[(gpus, fault)] / "result.json")


def _slurm_job_id(job_dir: Path) -> str:
    return json.loads((job_dir / "slurm.json").read_text())["job_id"]


def test_every_job_is_a_row_with_its_status(sweep):
    sweep_dir, _ = sweep
    statuses = {key: read_result(d / "result.json").status for key, d in _jobs(sweep_dir).items()}
    assert statuses == {
        (1, "none"): "ok",
        (2, "none"): "ok",
        (2, "crash"): "failed",
        (2, "hang"): "timeout",
        (1, "crash"): "invalid",  # fault.rank=1 is not a rank of gpus=1
        (1, "hang"): "invalid",
        (3, "none"): "invalid",  # 3 does not split into nodes of 2
        (3, "crash"): "invalid",
        (3, "hang"): "invalid",
    }


def test_jobs_get_their_own_task_counts(sweep):
    sweep_dir, _ = sweep
    for gpus in (1, 2):
        job_dir = _jobs(sweep_dir)[(gpus, "none")]
        slurm_id = _slurm_job_id(job_dir)
        record = json.loads((job_dir / "slurm.json").read_text())
        assert (record["nodes"], record["tasks_per_node"]) == (1, gpus)
        assert record["state"] == "COMPLETED"
        script = Path(record["submission_script"]).read_text()
        assert "#SBATCH --nodes=1" in script
        assert f"#SBATCH --ntasks-per-node={gpus}" in script
        assert "--gpus-per-node" not in script  # a CPU cluster: no GPU request
        assert "#SBATCH --signal=USR2@15" in script
        assert "#SBATCH --time=4" in script  # ceil((job_timeout_s=120 + USR2@15 + 60) / 60)
        steps = subprocess.run(
            ["sacct", "-n", "-P", "-j", f"{slurm_id}.0", "-o", "NTasks"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert steps == [str(gpus)]
        assert read_result(job_dir / "result.json").env["world_size"] == gpus
        for r in range(gpus):
            assert json.loads((job_dir / "ranks" / f"rank{r}.json").read_text())["status"] == "ok"


def test_raising_rank_is_the_reported_cause(sweep):
    sweep_dir, _ = sweep
    result = _result(sweep_dir, 2, "crash")
    assert result.error.startswith("rank 1: InjectedCrash"), result.error


def test_hanging_rank_ends_by_collective_timeout(sweep):
    sweep_dir, _ = sweep
    error = _result(sweep_dir, 2, "hang").error
    assert "collective_timeout_s=10" in error and "waiting for ranks [1]" in error, error


def test_configs_that_cannot_work_are_refused_before_submission(sweep):
    sweep_dir, log = sweep
    error = _result(sweep_dir, 3, "none").error
    assert "gpus=3" in error and "gpus_per_node=2" in error
    assert "fault.rank=1 is not a rank of gpus=1" in _result(sweep_dir, 1, "crash").error
    for key in ((3, "none"), (1, "crash")):
        assert not (_jobs(sweep_dir)[key] / "slurm.json").exists()  # nothing submitted
    assert log.count("refused before submission") == 5


@pytest.mark.skipif(
    not HAS_RESULTS_CSV, reason="harness.results.table (results.csv) not on this branch"
)
def test_results_csv_has_every_job(sweep):
    sweep_dir, _ = sweep
    with open(sweep_dir / "results.csv") as f:
        assert len(list(csv.DictReader(f))) == 9


def test_rerun_skips_ok_jobs_and_resubmits_the_failed_one(sweep):
    sweep_dir, _ = sweep
    ok_dir, failed_dir = _jobs(sweep_dir)[(2, "none")], _jobs(sweep_dir)[(2, "crash")]
    ok_before = read_result(ok_dir / "result.json")
    ok_job, failed_job = _slurm_job_id(ok_dir), _slurm_job_id(failed_dir)
    proc = _sweep(sweep_dir, "gpus=2", "fault.kind=none,crash", *TIMEOUTS)
    assert "skipped" in proc.stdout + proc.stderr
    assert _slurm_job_id(ok_dir) == ok_job
    assert read_result(ok_dir / "result.json") == ok_before
    assert _slurm_job_id(failed_dir) != failed_job  # resubmitted
    assert read_result(failed_dir / "result.json").status == "failed"
    assert list(failed_dir.glob("result.previous.*.json"))


@pytest.mark.slow  # SLURM's time limits have minute granularity: about 90 s
def test_job_past_its_wall_clock_limit_is_a_timeout(slurm_cluster: None, tmp_path: Path):
    _sweep(
        tmp_path,
        "gpus=2",
        "fault.kind=hang",
        "collective_timeout_s=600",  # only the wall-clock limit can end this job
        "job_timeout_s=30",  # with the warning's 15 s and SLURM's 60 s: --time=2
    )
    (job_dir,) = _jobs(tmp_path).values()
    result = read_result(job_dir / "result.json")
    assert result.status == "timeout"
    assert "job_timeout_s=30" in result.error and "--time=2 min" in result.error
    record = json.loads((job_dir / "slurm.json").read_text())
    # SLURM may send its warning signal up to 60 s before the limit (its event resolution);
    # submitit then ends the job itself as timed out, and sacct says FAILED, not TIMEOUT.
    logs = "".join(Path(record[k]).read_text() for k in ("stdout", "stderr"))
    ended_by_warning = "not requeued because: timed-out" in logs
    assert record["state"] == "TIMEOUT" or (record["state"] == "FAILED" and ended_by_warning)
    said = "exceeded its wall-clock limit" if record["state"] == "TIMEOUT" else "warning signal"
    assert said in result.error


def _sacct_state(slurm_id: str) -> str:
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", slurm_id, "-o", "State"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return out[0] if out else ""


def test_interrupting_the_sweep_cancels_its_slurm_jobs(slurm_cluster: None, tmp_path: Path):
    cmd = _command(tmp_path, "gpus=2", "fault.kind=hang", "collective_timeout_s=600")
    with stop_signals_reach_children():  # Ctrl-C reaches it, as from a terminal
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    deadline = time.monotonic() + 120
    # Interrupt once the job's ranks run (rank 0 reports its phase).
    while not list(tmp_path.glob("*/ranks/phase")):
        assert proc.poll() is None and time.monotonic() < deadline, "the job never started"
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out.decode()[-2000:] + err.decode()[-2000:]
    assert "resume with the same command" in err.decode()
    (job_dir,) = _jobs(tmp_path).values()
    slurm_id = _slurm_job_id(job_dir)
    result = read_result(job_dir / "result.json")
    assert result.status == "interrupted"
    assert f"SLURM job {slurm_id} was cancelled" in result.error
    assert json.loads((job_dir / "slurm.json").read_text())["state"] == "CANCELLED"
    assert _sacct_state(slurm_id).startswith("CANCELLED")
