"""No silent remainder: on every trace the tests have (real GPU traces, HTA's, synthetic
ones, and real 2-rank gloo CPU jobs), at most 5% of any step is left `unattributed`, the
causes sum to the step, and the exposed communication is the summary's."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.trace import summarize_job, summarize_trace
from harness.trace.diagnose import causes as C
from harness.trace.diagnose.attribute import StepAttribution
from harness.trace.jobs import attribute_job, attribute_trace
from tests.trace.kineto_program import write_program
from tests.trace.test_trace_attribute import CASES, _step

DATA = Path(__file__).resolve().parents[1] / "data"
REAL_GPU = [
    DATA / "gpu_traces/nccl_data.json.gz",
    DATA / "gpu_traces/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    DATA / "hta_traces/sampled/rank0.json.gz",
    DATA / "hta_traces/sampled/rank1.json.gz",
    DATA / "hta_traces/event_sync/rank0.json.gz",
]
MAX_UNATTRIBUTED = 0.05


def _check(steps: list[StepAttribution], summary_steps: list[dict]) -> None:
    assert steps
    by_key = {(r.get("rank", 0), r["step"]): r for r in summary_steps}
    for s in steps:
        assert sum(s.causes.values()) == pytest.approx(s.step_s, rel=1e-9, abs=1e-12)
        share = s.causes[C.UNATTRIBUTED] / s.step_s
        assert share <= MAX_UNATTRIBUTED, f"rank {s.rank} step {s.step}: {share:.1%} unattributed"
        row = by_key.get((s.rank, s.step)) or by_key[(0, s.step)]
        exposed = sum(s.causes[c] for c in C.EXPOSED_COMM)
        assert exposed == pytest.approx(row["exposed_comm_s"], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("path", REAL_GPU, ids=lambda p: p.parent.name + "/" + p.name)
def test_real_gpu_traces_leave_nothing_silent(path):
    _check(attribute_trace(path), summarize_trace(path)["steps"])


@pytest.mark.parametrize("inject", sorted(CASES))
def test_synthetic_traces_leave_nothing_silent(tmp_path, inject):
    size = CASES[inject][0]
    path = write_program(tmp_path / "rank0.json.gz", [_step(), _step(inject, size), _step()])
    _check(attribute_trace(path), summarize_trace(path)["steps"])


def test_cpu_jobs_leave_nothing_silent(cpu_jobs):
    for job_dir in cpu_jobs.values():
        steps = attribute_job(job_dir)
        assert {(s.rank, s.step) for s in steps} == {(0, 1), (0, 2), (1, 1), (1, 2)}
        _check(steps, summarize_job(job_dir)["steps"])


def test_cpu_job_causes_name_the_work(cpu_jobs):
    """blocking all-reduces after backward; overlapped reduce-scatters per unit inside the
    engine's ranges, so its exposed communication is a reduce-scatter of named units (these
    jobs' ranges use the older `unit<N>` names and record no units: shown as they are)."""
    blocking = attribute_job(cpu_jobs["blocking"])
    assert all(s.causes[C.COMM_ALL_REDUCE] > 0 for s in blocking)
    assert all(s.causes[C.COMPUTE_GEMM_ATTENTION] > 0 for s in blocking)
    overlapped = attribute_job(cpu_jobs["overlapped"])
    assert all(s.causes[C.COMM_REDUCE_SCATTER] > 0 for s in overlapped)
    units = set().union(*(s.by_unit.get(C.COMM_REDUCE_SCATTER, {}) for s in overlapped))
    assert units and units <= {f"unit{u}" for u in range(6)}
