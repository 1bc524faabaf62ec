"""FSDP1's backward as torch runs it, on a program small enough to work out by hand.

Six blocks of 1000 elements on 4 ranks; each block's backward takes 1 ms, an all-gather
4 ms, a reduce-scatter 3 ms; the cat of a unit's gradients (4000 bytes) 1 ms, its upcast
(6000 bytes) and pre-divide (8000 bytes) 1 ms each: a 2 ms chain. Nothing else costs time.

With the cat on the unshard stream, a unit's all-gather, the cat behind it, the chain and
the reduce-scatter run in series: the period is 4 + 1 + 2 + 3 = 10 ms. With the cat on the
compute stream, the chain overlaps the next all-gather and the communication stream binds:
4 + 3 = 7 ms.
"""

from __future__ import annotations

import pytest

from harness.plan.time.cycle import cycle
from harness.plan.time.programs.common import ModelCosts, PartCost, StepContext
from harness.plan.time.programs.fsdp1 import fsdp1_program
from harness.plan.time.simulate import UNSHARD, simulate

MS = 1e-3
BLOCKS, SIZE, WORLD = 6, 1000, 4
MEMORY_MS = {4 * SIZE: 1.0, 6 * SIZE: 1.0, 8 * SIZE: 1.0}  # cat, upcast, pre-divide
COLLECTIVE_MS = {"all_gather": 4.0, "reduce_scatter": 3.0}


def _ctx(*mechanisms: str) -> StepContext:
    return StepContext(
        world_size=WORLD,
        grad_accum=1,
        param_bytes=2,
        reduce_bytes=4,
        collective_s=lambda kind, nbytes: COLLECTIVE_MS.get(kind, 0.0) * MS,
        memory_s=lambda nbytes: MEMORY_MS.get(int(nbytes), 0.0) * MS,
        launch_s=0.0,
        hook_s=0.0,
        mechanisms=frozenset({"fsdp1_flat_grad", "fsdp1_grad_upcast", *mechanisms}),
    )


def _period(*mechanisms: str) -> float:
    part = PartCost(1 * MS, 1)
    costs = ModelCosts([part] * (BLOCKS + 2), [part] * (BLOCKS + 2))
    program = fsdp1_program(costs, [SIZE] * (BLOCKS + 2), 8, _ctx(*mechanisms))
    found = cycle(program, simulate(program))
    assert found is not None
    return found["period_s"]


def test_the_cat_on_the_unshard_stream_puts_the_backward_in_series() -> None:
    assert _period("fsdp1_cat_on_unshard") == pytest.approx(10 * MS)


def test_without_the_switch_the_cat_runs_on_compute_and_the_chain_hides() -> None:
    assert _period() == pytest.approx(7 * MS)


def test_the_cat_lands_on_the_unshard_stream_behind_an_all_gather() -> None:
    part = PartCost(1 * MS, 1)
    costs = ModelCosts([part] * (BLOCKS + 2), [part] * (BLOCKS + 2))
    ops = fsdp1_program(costs, [SIZE] * (BLOCKS + 2), 8, _ctx("fsdp1_cat_on_unshard"))
    on_unshard = [op.name.split(":", 1)[1].split(".")[0] for op in ops if op.stream == UNSHARD]
    cats = [i for i, label in enumerate(on_unshard) if label == "flat_grad"]
    assert cats and all(on_unshard[i - 1] in ("gathered", "flat_grad") for i in cats)
    assert on_unshard[cats[0] - 1] == "gathered"


# ---- upstream YaFSDP v1 as published --------------------------------------------------------


def _v1_period(*mechanisms: str) -> float:
    """The same six blocks under YaFSDP v1's program: its bf16->fp32 copy (6000 bytes) 1 ms
    on the comm stream, the reduce-scatter 3 ms, the all-gather 4 ms."""
    from harness.plan.time.programs.ya_fsdp_v1 import ya_fsdp_v1_program

    part = PartCost(1 * MS, 1)
    costs = ModelCosts([part] * (BLOCKS + 2), [part] * (BLOCKS + 2))
    ctx = _ctx(*mechanisms)
    program = ya_fsdp_v1_program(costs, [SIZE] * (BLOCKS + 2), ctx)
    found = cycle(program, simulate(program))
    assert found is not None
    return found["period_s"]


def test_yafsdp_v1_copies_on_its_comm_stream_between_the_gather_and_the_reduce_scatter() -> None:
    """The comm stream runs copy(l+2), waits for RS(l+2), then for AG(l), in its FIFO: the
    period is 1 + 3 + 4 = 8 ms; without the copy, 3 + 4 = 7 ms."""
    assert _v1_period("ya_fsdp_v1_grad_copy") == pytest.approx(8 * MS)
    assert _v1_period() == pytest.approx(7 * MS)


def test_yafsdp_v1_pre_hook_order() -> None:
    """Unit l's backward pre-hook: copy(l+2) -> RS(l+2) -> AG(l), then unit l's backward."""
    from harness.plan.time.programs.ya_fsdp_v1 import ya_fsdp_v1_program

    part = PartCost(1 * MS, 1)
    costs = ModelCosts([part] * (BLOCKS + 2), [part] * (BLOCKS + 2))
    ops = ya_fsdp_v1_program(costs, [SIZE] * (BLOCKS + 2), _ctx("ya_fsdp_v1_grad_copy"))
    labels = [op.name.split(":", 1)[1] for op in ops if op.seconds > 0 or op.kind]
    i = labels.index("backward.layers.2")
    assert labels[i - 3 : i] == [
        "grad_copy.layers.4",
        "reduce_scatter.layers.4",
        "all_gather.layers.2",
    ]
    names = [op.name.split(":", 1)[1] for op in ops]
    last_rs = max(i for i, n in enumerate(names) if n.startswith("reduce_scatter."))
    assert names.count("divide") == 1 and last_rs < names.index("divide") < names.index("adamw")
