"""The planner's program of each engine issues the collectives the engine itself issues.

For a small model on one rank of a fake process group, the kind and bytes of every
all-gather, reduce-scatter and all-reduce of a steady-state step, in order, equal those of
the planner's program for the same job (`harness.plan.timing.build_program`).
"""

from __future__ import annotations

import pytest

from tests.plan.engine_capture import fake_world, job, launched_by
from tests.plan.planned import collectives

WORLD = 4


CASES = [
    pytest.param(dict(), id="bf16"),
    pytest.param(dict(ckpt_layers=2), id="checkpointed"),
    pytest.param(dict(grad_accum=2), id="accumulation"),
    pytest.param(dict(dtype="fp32"), id="fp32"),
]


@pytest.mark.parametrize("fields", CASES)
@pytest.mark.parametrize("label", ["yafsdp", "fsdp1", "fsdp2", "fsdp2_tuned", "local"])
def test_the_planned_collectives_are_the_engines_own(label: str, fields: dict) -> None:
    cfg = job(label, WORLD, **fields)
    with fake_world(WORLD):
        issued = launched_by(cfg).collectives
    plan = collectives(cfg)
    if label.startswith("fsdp2"):
        # FSDP2 clips through DTensor's functional all-reduce, which runs below dispatch
        # modes: only the planner sees it. Everything else must match exactly.
        assert plan[-1] == ("all_reduce", 8)
        plan = plan[:-1]
    # The clip all-reduce is one scalar (fp64 in yafsdp, fp32 in FSDP1); the planner prices
    # 8 bytes either way (latency-bound). Every other collective matches to the byte.
    assert [k for k, _ in issued] == [k for k, _ in plan]
    assert [c for c in issued if c[0] != "all_reduce"] == [c for c in plan if c[0] != "all_reduce"]


def test_the_hf_model_plans_the_yafsdp_engines_collectives() -> None:
    cfg = job("yafsdp", WORLD, model_impl="hf")
    with fake_world(WORLD):
        issued = launched_by(cfg).collectives
    assert [k for k, _ in issued] == [k for k, _ in collectives(cfg)]
