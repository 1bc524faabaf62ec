"""`harness.plan --cycle`: one steady-state backward unit, on a program worked out by hand.

Three 10 ms backward blocks, each one kernel of 10 waves (1 ms a wave); block 2's gradient
is upcast (1 ms, side stream) and reduce-scattered (4 ms), both at priority -1, so each
waits one wave. The middle block's period runs 10-20 ms: the upcast waits 10-11, runs
11-12; the reduce-scatter waits 12-13 and runs 13-17.
"""

from __future__ import annotations

import pytest

from harness.plan.cli import main
from harness.plan.time.cycle import cycle, format_cycle, give_way_detail
from harness.plan.time.simulate import COMM, COMPUTE, SIDE, HandOut, Op, simulate

MS = 1e-3


def _program() -> list[Op]:
    blocks = [
        Op(f"{i + 1}:backward.layers.{b}", COMPUTE, 10 * MS, "compute", unit=f"layers.{b}",
           kernels=((10 * MS, 10.0),))
        for i, b in enumerate((2, 1, 0))
    ]  # fmt: skip
    upcast = Op("4:upcast.layers.2", SIDE, 1 * MS, "t", waits=(blocks[0].name,))
    rs = Op("5:reduce_scatter.layers.2", COMM, 4 * MS, "comm", waits=(upcast.name,),
            unit="layers.2", kind="reduce_scatter")  # fmt: skip
    return [*blocks, upcast, rs]


def test_the_cycle_splits_the_idle_time_before_each_collective() -> None:
    program = _program()
    rules = HandOut(priorities={COMPUTE: 0, SIDE: -1, COMM: -1})
    got = cycle(program, simulate(program, hand_out_rules=rules))
    assert got is not None
    assert got["unit"] == "layers.1"
    assert got["period_s"] == pytest.approx(10 * MS)
    assert got["compute_busy_s"] == pytest.approx(10 * MS)
    (rs,) = got["collectives"]
    assert rs["kernel_s"] == pytest.approx(4 * MS)
    assert rs["idle_before_s"] == pytest.approx(13 * MS)
    causes = rs["idle_causes_s"]
    assert causes["waiting for compute kernels"] == pytest.approx(2 * MS)
    assert causes["chain kernels"] == pytest.approx(1 * MS)
    assert causes["slowest rank"] == 0
    assert causes["input not ready"] == pytest.approx(10 * MS)
    assert "reduce_scatter of layers.2 after upcast.layers.2" in format_cycle("x", got)


def test_the_give_way_detail_counts_the_units_that_waited() -> None:
    program = _program()
    rules = HandOut(priorities={COMPUTE: 0, SIDE: -1, COMM: -1})
    detail = give_way_detail(program, simulate(program, hand_out_rules=rules))
    assert detail["units"] == 1
    assert detail["per_unit_s"] == pytest.approx(2 * MS)
    assert detail["chain_kernels"] == ["upcast"]
    off = simulate(program, hand_out_rules=HandOut(rules.priorities, give_way=False))
    assert give_way_detail(program, off)["units"] == 0


def test_the_cli_prints_the_cycle_and_the_json_carries_it(capsys) -> None:
    job = ["hardware=a100_80gb", "model=llama_tiny", "engine=fsdp1", "gpus=4", "seq_len=32"]
    assert main(["--cycle", *job]) == 0
    out = capsys.readouterr().out
    assert "period" in out and "reduce_scatter of" in out
    assert main(["--json", *job]) == 0
    assert '"cycle"' in capsys.readouterr().out
