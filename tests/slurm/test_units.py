"""SLURM launcher pieces that need no cluster: job shapes, refusals, statuses from ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.jobdir.rank_outcome import write_rank_outcome
from harness.jobdir.result import Result, make_result, read_result, write_result
from harness.slurm.job_end import JobEnd, decide
from harness.slurm.rank import INHERITED_DIST_VARS, export_rank_env
from harness.slurm.resources import ShapeError, job_shape, time_limit_min


@pytest.mark.parametrize(
    ("gpus", "per_node", "nodes", "tasks"),
    [(1, 8, 1, 1), (2, 8, 1, 2), (8, 8, 1, 8), (16, 8, 2, 8), (64, 8, 8, 8), (256, 8, 32, 8),
     (3, 2, None, None), (12, 8, None, None), (6, 4, None, None), (4, 2, 2, 2)],
)  # fmt: skip
def test_job_shape_arithmetic(gpus: int, per_node: int, nodes: int | None, tasks: int | None):
    if nodes is None:
        with pytest.raises(ShapeError):
            job_shape(gpus, per_node, request_gpus=True)
        return
    shape = job_shape(gpus, per_node, request_gpus=True)
    assert (shape.nodes, shape.tasks_per_node) == (nodes, tasks)
    assert shape.world_size == gpus
    assert shape.gpus_per_node == tasks  # exactly the GPUs the ranks of a node use


def test_no_gpu_request_on_cpu_clusters():
    assert job_shape(2, 8, request_gpus=False).gpus_per_node is None


def test_refusal_names_the_fields_and_the_fix():
    with pytest.raises(ShapeError) as e:
        job_shape(12, 8, request_gpus=True)
    msg = str(e.value)
    assert "gpus=12" in msg and "gpus_per_node=8" in msg
    assert "gpus=8" in msg and "gpus=16" in msg  # the nearest counts that do split
    with pytest.raises(ShapeError, match="gpus=0"):
        job_shape(0, 8, request_gpus=True)
    with pytest.raises(ShapeError, match="gpus_per_node=0"):
        job_shape(8, 0, request_gpus=True)


def test_time_limit_rounds_up_to_whole_minutes():
    # job_timeout_s, then SLURM's warning: signal_delay_s and its 60 s resolution
    assert time_limit_min(3600, 15) == 62
    assert time_limit_min(45, 15) == 2
    assert time_limit_min(46, 15) == 3
    with pytest.raises(ShapeError):
        time_limit_min(0, 15)


def test_rank_env_ignores_inherited_distributed_variables(monkeypatch):
    # What sbatch exports from a submitter that itself ran under torchrun.
    for var in INHERITED_DIST_VARS:
        monkeypatch.setenv(var, "999")
    slurm = {
        "SLURM_JOB_ID": "4242",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS": "4",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "node[7-8]",
        "SLURM_NODEID": "1",
        "SUBMITIT_EXECUTOR": "slurm",
    }
    for k, v in slurm.items():
        monkeypatch.setenv(k, v)
    import os

    assert export_rank_env() == (3, 4)
    assert os.environ["RANK"] == "3" and os.environ["WORLD_SIZE"] == "4"
    assert os.environ["LOCAL_RANK"] == "1" and os.environ["LOCAL_WORLD_SIZE"] == "2"
    assert os.environ["MASTER_ADDR"] == "node7"
    assert os.environ["MASTER_PORT"] != "999"
    assert "TORCHELASTIC_RUN_ID" not in os.environ


# --- deciding a job's status from its ranks -------------------------------------------


def _end(state: str = "COMPLETED", world: int = 2, **kw) -> JobEnd:
    return JobEnd(
        slurm_job_id="77",
        slurm_state=state,
        world_size=world,
        job_timeout_s=90,
        time_limit_min=2,
        collective_timeout_s=5,
        **kw,
    )


CFG = {"model": "llama_tiny", "gpus": 2}


def _ok(job_dir: Path, rank: int) -> None:
    write_rank_outcome(job_dir, rank, error=None)


def fail(job_dir: Path, rank: int, error: BaseException) -> None:
    write_rank_outcome(job_dir, rank, error=error)


def _ok_result(job_dir: Path) -> Result:
    result = make_result(status="ok", config=CFG, metrics={"iteration_time_s": 1.0})
    write_result(job_dir, result)
    return result


def test_all_ranks_ok_keeps_rank0_result(tmp_path: Path):
    ok = _ok_result(tmp_path)
    for r in range(2):
        _ok(tmp_path, r)
    result, changed = decide(tmp_path, CFG, _end())
    assert not changed and result == ok


def test_rank_failing_after_last_collective_turns_ok_into_failed(tmp_path: Path):
    _ok_result(tmp_path)
    _ok(tmp_path, 0)
    fail(tmp_path, 1, RuntimeError("boom in teardown"))
    result, changed = decide(tmp_path, CFG, _end("FAILED"))
    assert changed
    assert result.status == "failed"
    assert result.error.startswith("rank 1: RuntimeError: boom in teardown")
    assert result.metrics.to_dict() == {"iteration_time_s": 1.0}  # rank 0's measurements kept
    assert read_result(tmp_path / "result.json").status == "failed"


def test_root_cause_beats_the_peers_echo(tmp_path: Path):
    fail(tmp_path, 0, RuntimeError("[pair.cc:537] Connection closed by peer"))
    fail(tmp_path, 1, ValueError("rank 1 raised at step 1"))
    result, _ = decide(tmp_path, CFG, _end("FAILED"))
    assert result.status == "failed"
    assert result.error.startswith("rank 1: ValueError: rank 1 raised")
    assert "ranks [0]" in result.error


def test_oom_on_any_rank_is_the_status(tmp_path: Path):
    fail(tmp_path, 0, RuntimeError("Connection reset by peer"))
    fail(tmp_path, 1, MemoryError("over memory_limit_gb"))
    result, _ = decide(tmp_path, CFG, _end("FAILED"))
    assert result.status == "oom" and "rank 1" in result.error


def test_hung_rank_reads_as_collective_timeout(tmp_path: Path):
    fail(tmp_path, 0, RuntimeError("Timed out waiting 5000ms for recv"))
    result, _ = decide(tmp_path, CFG, _end("FAILED"))  # rank 1 was killed: no outcome
    assert result.status == "timeout"
    assert "collective_timeout_s=5" in result.error and "[1]" in result.error


def test_slurm_time_limit_is_a_timeout(tmp_path: Path):
    _ok(tmp_path, 0)
    result, _ = decide(tmp_path, CFG, _end("TIMEOUT"))
    assert result.status == "timeout"
    assert "job_timeout_s=90" in result.error and "--time=2" in result.error


def test_ranks_that_never_ran(tmp_path: Path):
    result, _ = decide(tmp_path, CFG, _end("FAILED", task_errors={0: "ImportError: no torch"}))
    assert result.status == "failed"
    assert "ranks [0, 1] ended without an outcome" in result.error
    assert "ImportError: no torch" in result.error
    assert result.config == CFG


def test_all_ok_but_no_result_file(tmp_path: Path):
    for r in range(2):
        _ok(tmp_path, r)
    result, changed = decide(tmp_path, CFG, _end())
    assert changed and result.status == "failed"
    assert "without writing result.json" in result.error


def test_rank0_own_verdict_stands_when_nobody_knows_better(tmp_path: Path):
    invalid = make_result(status="invalid", config=CFG, error="ckpt_layers=9 > 4 layers")
    write_result(tmp_path, invalid)
    for r in range(2):
        _ok(tmp_path, r)
    result, changed = decide(tmp_path, CFG, _end())
    assert not changed and result == invalid


def test_unreadable_rank_file_counts_as_no_outcome(tmp_path: Path):
    (tmp_path / "ranks").mkdir()
    (tmp_path / "ranks" / "rank0.json").write_text('{"rank": 0, "sta')  # half-written
    _ok(tmp_path, 1)
    _ok_result(tmp_path)
    result, _ = decide(tmp_path, CFG, _end("FAILED"))
    assert result.status == "failed"
    assert "ranks [0] ended without an outcome" in result.error


def test_wall_clock_signal_in_rank0_is_a_timeout(tmp_path: Path):
    # submitit's answer to SLURM's warning signal, raised inside rank 0's training loop
    fail(tmp_path, 0, RuntimeError("Job not requeued because: timed-out and not checkpointable."))
    result, _ = decide(tmp_path, CFG, _end("FAILED"))
    assert result.status == "timeout" and "job_timeout_s=90" in result.error


def test_the_warning_signal_is_said_not_called_a_blown_limit(tmp_path: Path):
    """SLURM may send its warning (USR2, signal_delay_s before --time) up to 60 s early;
    submitit then ends the job itself and sacct says FAILED: the row says the warning
    ended it, not that the job ran past its wall-clock limit."""
    fail(tmp_path, 0, RuntimeError("Job not requeued because: timed-out and not checkpointable."))
    result, _ = decide(tmp_path, CFG, _end("FAILED"))
    assert result.status == "timeout"
    assert "warning signal" in result.error and "exceeded" not in result.error
    assert "--time=2 min" in result.error and "job_timeout_s=90" in result.error
    # SLURM's own TIMEOUT is the limit itself
    result, _ = decide(tmp_path / "x", CFG, _end("TIMEOUT"))
    assert "exceeded its wall-clock limit" in result.error


@pytest.mark.parametrize(("timeout_s", "delay_s"), [(30, 15), (3600, 15), (5, 0), (600, 120)])
def test_the_derived_time_limit_leaves_the_job_its_timeout_before_any_warning(
    timeout_s: float, delay_s: int
):
    # the earliest warning: signal_delay_s before the end, and SLURM's 60 s resolution
    earliest_warning_s = time_limit_min(timeout_s, delay_s) * 60 - delay_s - 60
    assert earliest_warning_s >= timeout_s


def test_a_time_limit_shorter_than_the_job_needs_is_refused():
    from harness.slurm.resources import time_limit_error

    error = time_limit_error(time_min=1, job_timeout_s=3600, signal_delay_s=15)
    assert error is not None
    assert "time_min=1" in error and "job_timeout_s=3600" in error and "signal_delay_s=15" in error
    assert f"time_min={time_limit_min(3600, 15)}" in error  # the fix
    assert time_limit_error(time_min=None, job_timeout_s=3600, signal_delay_s=15) is None
    assert time_limit_error(time_min=62, job_timeout_s=3600, signal_delay_s=15) is None
