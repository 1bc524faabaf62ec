"""A job's status and error from what its ranks left: one rule for both launchers, naming
the real cause (issue 30: L1, L2, M8; issue 29: one decider)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from harness.config import JobConfig
from harness.job.run import decide_result
from harness.jobdir.rank_outcome import classify, write_rank_outcome
from harness.slurm.job_end import JobEnd, decide

CFG = JobConfig(gpus=2, job_timeout_s=90, collective_timeout_s=10)
GLOO_TIMEOUT = RuntimeError(
    "[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 10000ms for recv operation"
)


def _slurm_end(state: str) -> JobEnd:
    return JobEnd(
        slurm_job_id="77",
        slurm_state=state,
        world_size=2,
        job_timeout_s=90,
        time_limit_min=2,
        collective_timeout_s=10,
    )


def _exits(job_dir: Path, exits: dict[int, int]) -> None:
    ranks = job_dir / "ranks"
    ranks.mkdir(parents=True, exist_ok=True)
    record = {str(r): {"exitcode": code, "time": time.time()} for r, code in exits.items()}
    (ranks / "exits.json").write_text(json.dumps(record))


def test_both_launchers_word_a_job_past_its_wall_clock_limit_alike(tmp_path: Path) -> None:
    local = decide_result(CFG, tmp_path / "local", exit_code=-15, timed_out=True)
    slurm, _ = decide(tmp_path / "slurm", {"gpus": 2}, _slurm_end("TIMEOUT"))
    assert local.status == slurm.status == "timeout"
    rule = "job exceeded its wall-clock limit job_timeout_s=90 ("
    assert local.error.startswith(rule) and slurm.error.startswith(rule), (local, slurm)
    assert "the runner ended it" in local.error and "SLURM --time=2 min" in slurm.error


def test_both_launchers_name_the_silent_rank_of_a_hang(tmp_path: Path) -> None:
    for job_dir in (tmp_path / "local", tmp_path / "slurm"):
        write_rank_outcome(job_dir, 0, error=GLOO_TIMEOUT)  # rank 1 hung: no outcome
    local = decide_result(CFG, tmp_path / "local", exit_code=1, timed_out=False)
    slurm, _ = decide(tmp_path / "slurm", {"gpus": 2}, _slurm_end("FAILED"))
    assert local.status == slurm.status == "timeout"
    assert local.error == slurm.error
    assert local.error.startswith("rank 1 stopped answering and left no outcome"), local.error
    assert "waiting for ranks [1]" in local.error and "collective_timeout_s=10" in local.error


def test_a_killed_launcher_is_named_not_its_ranks_keyboard_interrupt(tmp_path: Path) -> None:
    for rank in (0, 1):  # torch sends SIGINT to the ranks of an agent that died
        write_rank_outcome(tmp_path, rank, error=KeyboardInterrupt())
    result = decide_result(CFG, tmp_path, exit_code=-9, timed_out=False)
    assert result.status == "failed"
    assert result.error.startswith(
        "the ranks' launcher (python -m harness.job.launch) was killed (SIGKILL)"
    ), result.error
    assert "KeyboardInterrupt" not in result.error


def test_the_cpu_allocators_out_of_memory_is_oom() -> None:
    error = RuntimeError(  # as torch.empty(2**52, dtype=torch.uint8) raises it on CPU
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
        "memory: you tried to allocate 4503599627370496 bytes. Error code 12 (Cannot allocate "
        "memory)"
    )
    assert classify(error) == "oom"
    assert classify(RuntimeError("shape mismatch")) == "failed"


def test_a_sigkill_during_a_kernel_oom_kill_is_named_an_oom(tmp_path: Path) -> None:
    write_rank_outcome(tmp_path, 0, error=RuntimeError("Connection reset by peer"))
    _exits(tmp_path, {1: -9})
    oom = decide_result(CFG, tmp_path, exit_code=1, timed_out=False, oom_kills=1)
    assert oom.status == "oom"
    assert oom.error.startswith("rank 1 was killed (SIGKILL) by the kernel's out-of-memory killer")
    plain = decide_result(CFG, tmp_path, exit_code=1, timed_out=False, oom_kills=0)
    assert plain.status == "failed" and "out-of-memory" not in plain.error


@pytest.mark.parametrize(
    ("proc_cgroup", "files"),
    [
        ("0::/job.slice\n", {"job.slice/memory.events": "oom 3\noom_kill 2\n"}),
        (
            "4:memory:/docker/abc\n0::/\n",
            {"memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"},
        ),
    ],
)
def test_the_oom_kill_count_is_read_from_cgroup_v2_and_v1(
    tmp_path: Path, proc_cgroup: str, files: dict[str, str]
) -> None:
    from harness.job.oom_kills import oom_kill_count

    (tmp_path / "cgroup").write_text(proc_cgroup)
    for name, text in files.items():
        path = tmp_path / "fs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    expected = int(next(iter(files.values())).split("oom_kill ")[1].split()[0])
    assert oom_kill_count(tmp_path / "cgroup", tmp_path / "fs") == expected
    assert oom_kill_count(tmp_path / "missing", tmp_path / "fs") is None


def test_ranks_silenced_by_a_full_disk_are_named_so_and_their_temporaries_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.job.run as job_run

    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / ".rank0.json.tmp.tmp").write_text("{")  # a trace writer cut short
    monkeypatch.setattr(job_run, "disk_full", lambda path: True, raising=False)
    result = decide_result(CFG, tmp_path, exit_code=1, timed_out=False)  # no rank wrote a word
    assert result.status == "failed"
    assert result.error.startswith(f"no space left on {tmp_path}"), result.error
    assert not list(tmp_path.rglob("*.tmp"))


def test_hydra_saves_no_config_into_a_full_or_read_only_job_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.cli as cli

    assert cli._hydra_subdir(False, str(tmp_path), ".hydra") == ".hydra"
    assert cli._hydra_subdir(True, str(tmp_path), ".hydra") is None  # a dry run
    monkeypatch.setattr(cli, "disk_full", lambda path: True)
    assert cli._hydra_subdir(False, str(tmp_path), ".hydra") is None  # Hydra would raise
