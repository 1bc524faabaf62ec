"""The SM hand-out rules (`handout.py`) on programs small enough to work out by hand.

A 3 ms GEMM of 10 waves (0.3 ms a wave) runs on the compute stream from t = 0; a side
kernel or a collective becomes ready at 0.5 ms or 1 ms, while the GEMM holds the SMs.
"""

from __future__ import annotations

import pytest

from harness.plan.time.give_way import GiveWayConstants, give_way_constants
from harness.plan.time.handout import HandOut, expected_slowest_extra
from harness.plan.time.simulate import COMM, COMPUTE, SIDE, UNSHARD, Op, simulate
from harness.plan.time.slowest_rank import expected_chain_extra
from harness.plan.time.streams import parse_version, stream_priorities

MS = 1e-3
GEMM = Op("gemm", COMPUTE, 3 * MS, "compute", kernels=((3 * MS, 10.0),))


def _rules(
    side: int, comm: int = 0, world: int = 1, give_way: bool = True, slowest_rank: bool = True,
    per_link: bool = False,
) -> HandOut:  # fmt: skip
    return HandOut(priorities={COMPUTE: 0, SIDE: side, COMM: comm}, world_size=world,
                   give_way=give_way, slowest_rank=slowest_rank, per_link=per_link)  # fmt: skip


def _side(ready_ms: float, seconds_ms: float = 1.0, launches: int = 1) -> Op:
    return Op("side", SIDE, seconds_ms * MS, "t", host_s=ready_ms * MS, launches=launches)


def test_without_the_rules_a_side_kernel_starts_when_ready() -> None:
    t = simulate([GEMM, _side(0.5)])
    assert t.start["side"] == pytest.approx(0.5 * MS)


def test_equal_priority_side_kernel_waits_for_the_gemm_to_end() -> None:
    """R1: priority 0, ready at 0.5 ms: waits the GEMM's remaining 2.5 ms, runs 3-4 ms."""
    t = simulate([GEMM, _side(0.5)], hand_out_rules=_rules(side=0))
    assert t.start["side"] == pytest.approx(3 * MS)
    assert t.end["side"] == pytest.approx(4 * MS)
    assert t.give_way["side"] == pytest.approx(2.5 * MS)


def test_high_priority_side_kernel_waits_one_wave() -> None:
    """R4: priority -1: waits one wave (3 ms / 10 waves), runs 0.8-1.8 ms."""
    t = simulate([GEMM, _side(0.5)], hand_out_rules=_rules(side=-1))
    assert t.start["side"] == pytest.approx(0.8 * MS)
    assert t.end["side"] == pytest.approx(1.8 * MS)


def test_the_switch_off_leaves_the_side_kernel_alone() -> None:
    t = simulate([GEMM, _side(0.5)], hand_out_rules=_rules(side=0, give_way=False))
    assert t.start["side"] == pytest.approx(0.5 * MS)


def test_a_kernel_launched_twice_waits_one_more_compute_kernel() -> None:
    """R2: three 3 ms GEMMs; a 1 ms side kernel in two launches, ready at 0.5 ms, waits
    2.5 ms for the first GEMM and 3 ms for the second: its latency is the first wait plus
    the side kernels plus one compute kernel, 2.5 + 1 + 3 = 6.5 ms."""
    gemms = Op("gemms", COMPUTE, 9 * MS, "compute", kernels=((3 * MS, 10.0),) * 3)
    t = simulate([gemms, _side(0.5, launches=2)], hand_out_rules=_rules(side=0))
    assert t.end["side"] - 0.5 * MS == pytest.approx(6.5 * MS)


def test_a_collective_after_a_side_kernel_waits_one_more_compute_kernel() -> None:
    """R2/R3: side (1 ms) then a collective (2 ms), both at priority 0, beside three GEMMs:
    the side kernel waits 2.5 ms (3-4 ms), the collective the next GEMM (3 ms): 7-9 ms."""
    gemms = Op("gemms", COMPUTE, 9 * MS, "compute", kernels=((3 * MS, 10.0),) * 3)
    coll = Op("rs", COMM, 2 * MS, "comm", waits=("side",), kind="reduce_scatter")
    t = simulate([gemms, _side(0.5), coll], hand_out_rules=_rules(side=0))
    assert t.start["rs"] == pytest.approx(7 * MS)
    assert t.end["rs"] == pytest.approx(9 * MS)


def test_the_slowest_of_two_ranks_at_every_link_of_a_chain() -> None:
    """R5 per link, W = 2. The side kernel's first wait is this rank's 2.5 ms of the 3 ms
    GEMM (the other rank's: uniform on [0, 3]); the collective after it races the next 3 ms
    GEMM, lost with p = 1/2: this rank expects 2.5 + 1.5 = 4 ms. The other rank's T = 3U + 3B:
    E[max(4, T)] = 1/2 x 4 + 1/2 x (1/3 x 4 + 2/3 x 5) = 13/3 ms, 1/3 ms past this rank's own.
    So the side kernel runs 3-4 ms and the collective starts at 4 + 1.5 + 1/3 ms."""
    gemms = Op("gemms", COMPUTE, 9 * MS, "compute", kernels=((3 * MS, 10.0),) * 3)
    coll = Op("rs", COMM, 2 * MS, "comm", waits=("side",), kind="reduce_scatter")
    t = simulate([gemms, _side(0.5), coll], hand_out_rules=_rules(side=0, world=2, per_link=True))
    assert t.give_way["rs"] == pytest.approx(1.5 * MS)
    assert t.slowest_rank["rs"] == pytest.approx(MS / 3, rel=1e-3)
    assert t.start["rs"] == pytest.approx((4 + 1.5 + 1 / 3) * MS, rel=1e-4)
    # v3, the first link only: the full next GEMM (7 ms) and 3 ms x (E[max(5/6, U)] - 5/6)
    first_only = simulate([gemms, _side(0.5), coll], hand_out_rules=_rules(side=0, world=2))
    assert first_only.start["rs"] == pytest.approx((7 + 3 * 0.5 / 36) * MS)


def test_the_chain_distribution_is_not_the_worst_case() -> None:
    """A 1 ms uniform first link and two 1 ms races: the worst case is 3 ms; the expected
    largest of W ranks grows towards it (13/8 ms at W = 2, worked out by hand) and stays
    under it at 256 ranks."""
    assert 1.0 + expected_chain_extra(1.0, 1.0, (1.0, 1.0), 0.5, 2) == pytest.approx(1.625, 1e-4)
    at_256 = 1.0 + expected_chain_extra(1.0, 1.0, (1.0, 1.0), 0.5, 256)
    assert 2.9 < at_256 < 3.0
    assert expected_chain_extra(0.0, 3 * MS, (), 0.5, 256) == pytest.approx(
        expected_slowest_extra(0.0, 3 * MS, 256), rel=1e-3
    )


@pytest.mark.parametrize(("priority", "start_ms"), [(0, 3.0), (-1, 1.3)])
def test_a_collective_issued_mid_gemm(priority: int, start_ms: float) -> None:
    """R3: ready at 1 ms; at priority 0 it waits for free SMs at the GEMM's end; at -1, one
    wave (0.3 ms)."""
    coll = Op("ag", COMM, 2 * MS, "comm", host_s=1 * MS, kind="all_gather")
    t = simulate([GEMM, coll], hand_out_rules=_rules(side=0, comm=priority))
    assert t.start["ag"] == pytest.approx(start_ms * MS)


def test_slowest_rank_at_one_rank_adds_nothing() -> None:
    coll = Op("ag", COMM, 2 * MS, "comm", host_s=0.5 * MS, kind="all_gather")
    t = simulate([GEMM, coll], hand_out_rules=_rules(side=0, world=1))
    assert t.slowest_rank == {}
    assert t.start["ag"] == pytest.approx(3 * MS)
    assert expected_slowest_extra(0.0, 3 * MS, 1) == 0.0


def test_slowest_rank_at_256_ranks() -> None:
    """R5: this rank waits 2.5 of the GEMM's 3 ms (x = 5/6); the other 255 ranks wait
    uniformly on [0, 3 ms]. E[max(x, M)] = x**256 + 255/256 (1 - x**256), x**256 ~ 1e-20:
    the extra wait is 3 ms x (255/256 - 5/6) = 0.48828 ms."""
    coll = Op("ag", COMM, 2 * MS, "comm", host_s=0.5 * MS, kind="all_gather")
    t = simulate([GEMM, coll], hand_out_rules=_rules(side=0, world=256))
    extra = 3 * MS * (255 / 256 - 5 / 6)
    assert t.slowest_rank["ag"] == pytest.approx(extra, rel=1e-6)
    assert t.start["ag"] == pytest.approx(3 * MS + extra, rel=1e-6)
    off = simulate([GEMM, coll], hand_out_rules=_rules(side=0, world=256, slowest_rank=False))
    assert off.start["ag"] == pytest.approx(3 * MS)


def test_slowest_rank_from_a_rank_at_the_kernel_start_tends_to_the_whole_kernel() -> None:
    """A rank that waits nothing, among 255 others uniform on [0, c]: c x 255/256."""
    assert expected_slowest_extra(0.0, 3 * MS, 256) == pytest.approx(3 * MS * 255 / 256)


def test_stream_priorities_by_engine_and_version() -> None:
    assert stream_priorities("fsdp1", "2.3") == {COMPUTE: 0, SIDE: 0, UNSHARD: 0, COMM: 0}
    assert stream_priorities("fsdp1", "2.13.0+cpu") == {COMPUTE: 0, SIDE: 0, UNSHARD: 0, COMM: 0}
    assert stream_priorities("fsdp2", "2.7") == {COMPUTE: 0, SIDE: -1, UNSHARD: -1, COMM: 0}
    assert stream_priorities("fsdp2", "2.8") == {COMPUTE: 0, SIDE: -1, UNSHARD: -1, COMM: -1}
    assert stream_priorities("yafsdp", "2.3")[COMM] == 0
    assert stream_priorities("yafsdp", "2.13")[COMM] == -1
    assert parse_version("2.13.0+cpu") == (2, 13)
    with pytest.raises(ValueError, match="torch_version"):
        parse_version("latest")


def test_calibration_section_overrides_the_constants() -> None:
    got = give_way_constants({"give_way": {"equal_priority_wait": 0.8, "source": "probe"}})
    assert got == GiveWayConstants(equal_priority_wait=0.8)
    with pytest.raises(ValueError, match="give_way.wave"):
        give_way_constants({"give_way": {"wave": 1}})


def test_the_published_experiment_plans_at_torch_2_3_and_a_job_at_the_installed_one() -> None:
    from harness.plan.cli import job_configs
    from harness.plan.planner import time_case
    from harness.plan.time.streams import installed_torch_version

    published = job_configs(["experiment=yafsdp_readme", "point=llama2_7b_g64_s2048_c0",
                             "engine=fsdp1"])  # fmt: skip
    assert [c.engine.label for c in published] == ["fsdp1", "ya_fsdp_v1"]  # plan_engines
    assert [time_case(c).torch_version for c in published] == ["2.3", "2.3"]
    (plain,) = job_configs(["hardware=a100_80gb", "model=llama_tiny", "engine=fsdp1"])
    assert time_case(plain).torch_version == installed_torch_version()
