"""Across ranks: hand-built multi-rank traces with known clock offsets and late arrivals."""

import json

import pytest

from harness.trace.diagnose import causes
from harness.trace.diagnose.attribute import StepAttribution
from harness.trace.diagnose.ranks import (
    SKEW,
    exposed_skew,
    late_arrivals,
    split_collectives,
    with_skew,
)
from harness.trace.jobs import job_cross_rank
from harness.trace.parse import load_trace
from harness.trace.summary import analyse
from tests.trace.synthetic import Kernel, nccl, write_gpu_trace

REDUCE_SCATTER = (
    "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
)
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add>"


def _rank_kernels(step: int, t0: float, compute_us: float, nccl_stream: int) -> list[Kernel]:
    """A step in true time: compute until it arrives, an all-gather that ends for every rank
    at t0 + 1500 (the last arrival is at t0 + 1300), compute after it, then a reduce-scatter
    every rank reaches at t0 + 2000 (no skew) that lasts 100 us."""
    return [
        Kernel(step, 7, t0, compute_us),
        nccl(step, nccl_stream, t0 + compute_us, 1500 - compute_us),
        Kernel(step, 7, t0 + 1500, 500),
        Kernel(step, nccl_stream, t0 + 2000, 100, REDUCE_SCATTER),
        Kernel(step, 7, t0 + 2100, 400),
    ]


def _shifted(kernels: list[Kernel], offset: float) -> list[Kernel]:
    return [k._replace(start=k.start + offset) for k in kernels]


@pytest.fixture
def two_ranks(tmp_path):
    """Rank 1 computes 300 us longer before the all-gather; its clock runs 5 ms ahead and
    its NCCL stream has another id."""
    jobs = tmp_path / "job"
    r0 = [k for s in (1, 2) for k in _rank_kernels(s, s * 10_000.0, 1000, 20)]
    r1 = [k for s in (1, 2) for k in _rank_kernels(s, s * 10_000.0, 1300, 24)]
    write_gpu_trace(jobs / "traces/rank0.json", r0, rank=0, world_size=2)
    write_gpu_trace(jobs / "traces/rank1.json", _shifted(r1, 5000.0), rank=1, world_size=2)
    return jobs


def test_offsets_recovered_and_late_rank_named(two_ranks):
    cross = job_cross_rank(two_ranks)
    assert cross.offsets_us == {0: 0.0, 1: pytest.approx(5000.0)}
    assert cross.unmatched == 0
    gathers = [s for s in cross.splits if s.kind == "all_gather"]
    assert len(gathers) == 4  # two steps, two ranks
    for s in gathers:
        assert s.late_rank == 1
        assert s.because == causes.COMPUTE_GEMM_ATTENTION  # rank 1 was still in its GEMM
        if s.rank == 0:
            assert s.wait_s == pytest.approx(300e-6)
            assert s.transfer_s == pytest.approx(200e-6)
        else:
            assert s.wait_s == 0.0
            assert s.transfer_s == pytest.approx(200e-6)
    for s in (s for s in cross.splits if s.kind == "reduce_scatter"):
        assert s.wait_s == pytest.approx(0.0, abs=1e-9)
        assert s.transfer_s == pytest.approx(100e-6)
    (line,) = late_arrivals(cross)
    assert line.startswith("skew: rank 1 arrived late, because compute.gemm_attention")
    assert "0.300 ms per step waited" in line  # 300 us in each of two steps


def test_split_is_the_same_whatever_the_clock_offsets(tmp_path):
    """The same traces with no clock shift give the same split: the split depends on the
    true arrivals only, not on the ranks' clocks."""
    r0 = _rank_kernels(1, 0.0, 1000, 20)
    r1 = _rank_kernels(1, 0.0, 1300, 20)
    for offset in (0.0, -7000.0, 123456.0):
        write_gpu_trace(tmp_path / f"o{offset}/traces/rank0.json", r0, rank=0, world_size=2)
        write_gpu_trace(
            tmp_path / f"o{offset}/traces/rank1.json", _shifted(r1, offset), rank=1, world_size=2
        )
        cross = job_cross_rank(tmp_path / f"o{offset}")
        assert cross.offsets_us[1] == pytest.approx(offset)
        wait = {(s.rank, s.kind): s.wait_s for s in cross.splits}
        assert wait[(0, "all_gather")] == pytest.approx(300e-6)
        assert wait[(1, "all_gather")] == 0.0


def test_three_ranks_each_collective_names_its_own_late_rank(tmp_path):
    """Rank 2 is late to the all-gather (host idle before it), rank 0 to the reduce-scatter
    (an elementwise kernel before it)."""
    t = {0: 0.0, 1: 40.0, 2: -900.0}  # clock offsets
    ranks = {
        0: [Kernel(1, 7, 0, 1000), nccl(1, 20, 1000, 500), Kernel(1, 7, 1500, 700, ELEMENTWISE),
            Kernel(1, 20, 2200, 100, REDUCE_SCATTER)],
        1: [Kernel(1, 7, 0, 1000), nccl(1, 20, 1000, 500), Kernel(1, 7, 1500, 300),
            Kernel(1, 20, 1800, 500, REDUCE_SCATTER)],
        2: [Kernel(1, 7, 0, 1000), nccl(1, 20, 1400, 100, launch=1390), Kernel(1, 7, 1500, 300),
            Kernel(1, 20, 1800, 500, REDUCE_SCATTER)],
    }  # fmt: skip
    for r, ks in ranks.items():
        write_gpu_trace(tmp_path / f"traces/rank{r}.json", _shifted(ks, t[r]), rank=r, world_size=3)
    cross = job_cross_rank(tmp_path)
    assert cross.offsets_us == {0: 0.0, 1: pytest.approx(40.0), 2: pytest.approx(-900.0)}
    by = {(s.rank, s.kind): s for s in cross.splits}
    assert {s.late_rank for s in cross.splits if s.kind == "all_gather"} == {2}
    assert by[(2, "all_gather")].because == causes.HOST_OTHER  # launched late on rank 2
    assert by[(0, "all_gather")].wait_s == pytest.approx(400e-6)
    assert {s.late_rank for s in cross.splits if s.kind == "reduce_scatter"} == {0}
    assert by[(0, "reduce_scatter")].because == causes.COMPUTE_OTHER
    assert by[(1, "reduce_scatter")].wait_s == pytest.approx(400e-6)
    assert by[(2, "reduce_scatter")].transfer_s == pytest.approx(100e-6)


def test_mismatched_kinds_are_dropped_and_counted(tmp_path):
    write_gpu_trace(
        tmp_path / "traces/rank0.json",
        [Kernel(1, 7, 0, 100), nccl(1, 20, 100, 50)],
        rank=0,
        world_size=2,
    )
    write_gpu_trace(tmp_path / "traces/rank1.json",
                    [Kernel(1, 7, 0, 100), Kernel(1, 20, 100, 50, REDUCE_SCATTER)],
                    rank=1, world_size=2)  # fmt: skip
    cross = job_cross_rank(tmp_path)
    assert cross.splits == [] and cross.unmatched == 1
    assert "not found on every rank" in cross.warnings[0]


def test_exposed_wait_moves_into_skew_and_the_step_still_sums(two_ranks):
    analyses = [analyse(load_trace(p)) for p in sorted((two_ranks / "traces").iterdir())]
    cross = split_collectives(analyses)
    skew = exposed_skew(analyses[0], cross.splits)
    assert skew[1] == {(1, "all_gather"): pytest.approx(300e-6)}
    assert exposed_skew(analyses[1], cross.splits) == {}
    step = StepAttribution(
        rank=0, step=1, start_us=0.0, step_s=2.5e-3,
        causes={causes.COMPUTE_GEMM_ATTENTION: 1.9e-3, causes.COMM_ALL_GATHER: 5e-4,
                causes.COMM_REDUCE_SCATTER: 1e-4},
        by_unit={causes.COMM_ALL_GATHER: {"3": 4e-4, "4": 1e-4}},
    )  # fmt: skip
    moved = with_skew(step, skew[1])
    assert moved.causes[SKEW] == pytest.approx(300e-6)
    assert moved.causes[causes.COMM_ALL_GATHER] == pytest.approx(200e-6)  # its own kind only
    assert moved.causes[causes.COMM_REDUCE_SCATTER] == pytest.approx(100e-6)
    assert sum(moved.causes.values()) == pytest.approx(step.step_s)
    assert moved.by_unit[SKEW] == {"rank 1": pytest.approx(300e-6)}
    assert moved.by_unit[causes.COMM_ALL_GATHER] == {"3": pytest.approx(1.6e-4),
                                                     "4": pytest.approx(0.4e-4)}  # fmt: skip
    assert with_skew(step, {}) is step


def test_skew_never_takes_more_than_the_exposed_collectives_hold():
    held = {causes.COMM_ALL_REDUCE: 2e-4, causes.HOST_OTHER: 8e-4}
    step = StepAttribution(rank=0, step=1, start_us=0.0, step_s=1e-3, causes=held)
    moved = with_skew(step, {(1, "all_reduce"): 3e-4, (2, "all_reduce"): 1e-4})
    assert moved.causes[SKEW] == pytest.approx(2e-4)
    assert moved.causes[causes.COMM_ALL_REDUCE] == 0.0
    assert moved.by_unit[SKEW] == {"rank 1": pytest.approx(2e-4)}  # the largest wait first
    assert sum(moved.causes.values()) == pytest.approx(step.step_s)


def _with_groups(path, groups: dict[int, str]) -> None:
    """Give the NCCL kernels of each stream the process group Kineto would record."""
    trace = json.loads(path.read_text())
    for e in trace["traceEvents"]:
        stream = (e.get("args") or {}).get("stream")
        if e.get("name", "").startswith("nccl") and stream in groups:
            e["args"].update({"Collective name": "allgather", "Process Group Name": groups[stream]})
    path.write_text(json.dumps(trace))


def test_recorded_process_groups_match_whatever_the_streams_first_use(tmp_path):
    """Rank 1 uses its second group first: by lane order the two would be crossed."""
    r0 = [Kernel(1, 7, 0, 100), nccl(1, 20, 100, 400), nccl(1, 30, 600, 100)]
    r1 = [Kernel(1, 7, 0, 100), nccl(1, 40, 50, 650), nccl(1, 50, 300, 200)]
    for r, ks, groups in ((0, r0, {20: "1", 30: "2"}), (1, r1, {40: "2", 50: "1"})):
        path = write_gpu_trace(tmp_path / f"traces/rank{r}.json", ks, rank=r, world_size=2)
        _with_groups(path, groups)
    cross = job_cross_rank(tmp_path)
    assert cross.unmatched == 0
    lanes = {(s.rank, s.lane): s for s in cross.splits}
    assert set(lanes) == {(r, f"group {g}") for r in (0, 1) for g in ("1", "2")}
    # group 1 ends at 500 on both ranks; rank 0 arrived at 100, rank 1 at 300
    assert lanes[(0, "group 1")].wait_s == pytest.approx(200e-6)
    assert lanes[(1, "group 1")].late_rank == 1
    assert lanes[(1, "group 2")].wait_s == pytest.approx(550e-6)
    assert lanes[(0, "group 2")].late_rank == 0


def test_a_partial_set_of_ranks_is_said(tmp_path):
    for r in (0, 1):
        write_gpu_trace(tmp_path / f"traces/rank{r}.json", _rank_kernels(1, 0.0, 1000, 20),
                        rank=r, world_size=8)  # fmt: skip
    (warning,) = job_cross_rank(tmp_path).warnings
    assert warning.startswith("only 2 of 8 ranks traced")


def test_skew_spills_to_the_kind_the_attribution_named():
    """gloo runs a reduce-scatter as an all-reduce: the span says all_reduce, the engine's
    range (and so the attribution) says reduce_scatter."""
    held = {causes.COMM_REDUCE_SCATTER: 5e-4, causes.COMM_ALL_REDUCE: 1e-4, causes.HOST_OTHER: 4e-4}
    step = StepAttribution(rank=0, step=1, start_us=0.0, step_s=1e-3, causes=held,
                           by_unit={causes.COMM_REDUCE_SCATTER: {"4": 5e-4}})  # fmt: skip
    moved = with_skew(step, {(1, "all_reduce"): 4e-4})
    assert moved.causes[SKEW] == pytest.approx(4e-4)
    assert moved.causes[causes.COMM_ALL_REDUCE] == 0.0
    assert moved.causes[causes.COMM_REDUCE_SCATTER] == pytest.approx(2e-4)
    assert moved.by_unit[causes.COMM_REDUCE_SCATTER] == {"4": pytest.approx(2e-4)}
    assert sum(moved.causes.values()) == pytest.approx(step.step_s)
