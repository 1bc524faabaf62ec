"""The planner's program of each engine issues the collectives and gradient kernels the
engine itself issues.

For a small model on one rank of a fake process group, the kind and bytes of every
all-gather, reduce-scatter and all-reduce of a steady-state step, in order, equal those of
the planner's program for the same job (`harness.plan.time.timing.build_program`).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.config import JobConfig
from harness.plan.time.programs.common import split_launches
from harness.plan.time.programs.fsdp1 import predivide_factor
from harness.plan.time.simulate import SIDE, Op
from tests.plan.engine_capture import fake_world, job, launched_by
from tests.plan.planned import collectives, program

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


# ---- the kernels between a unit's last backward kernel and its reduce-scatter ------------


def _with_reduce(cfg: JobConfig, reduce_dtype: str) -> JobConfig:
    return replace(cfg, engine=replace(cfg.engine, reduce_dtype=reduce_dtype))


def _chains(ops: list[Op]) -> list[list[str]]:
    """For each reduce-scatter, the side-stream kernels it waits for, first to last."""
    by_name = {op.name: op for op in ops}
    chains = []
    for op in ops:
        if op.kind != "reduce_scatter":
            continue
        chain: list[str] = []
        waits = op.waits
        while waits and by_name[waits[0]].stream == SIDE:
            chain.insert(0, by_name[waits[0]].name.split(":", 1)[1].split(".")[0])
            waits = by_name[waits[0]].waits
        chains.append(chain)
    return chains


@pytest.mark.parametrize(("reduce_dtype", "chain"), [("fp32", ["upcast", "predivide"]),
                                                     ("bf16", ["predivide"])])  # fmt: skip
def test_fsdp1_casts_and_predivides_before_each_reduce_scatter(
    reduce_dtype: str, chain: list[str]
) -> None:
    """FSDP1's post-backward stream casts the flat gradient to the reduce dtype where it
    differs, then pre-divides it, before each reduce-scatter: as many casts and divides on
    flat gradients as the engine runs, in that order."""
    cfg = _with_reduce(job("fsdp1", WORLD), reduce_dtype)
    with fake_world(WORLD):
        real = launched_by(cfg).ops
    flat = [k for k in real if all(len(s) == 1 for s, _ in k.shapes[:1])]
    # a cast of the unsharded gradient: the next divide is of the same tensor (the shard's
    # cast after the reduce-scatter, with a bf16 reduce, is followed by its add)
    divides_after = [[d for d in flat[i + 1 :] if d.name == "aten.div_.Tensor"][:1]
                     for i in range(len(flat))]  # fmt: skip
    casts = [k for k, after in zip(flat, divides_after, strict=True)
             if k.name == "aten._to_copy.default" and k.shapes[0][1] == "bfloat16"
             and after and after[0].shapes[0][0] == k.shapes[0][0]]  # fmt: skip
    planned = _chains(program(cfg))
    assert all(c == chain for c in planned)
    assert len(casts) == sum(c.count("upcast") for c in planned)
    # one pre-divide of each unit's gradient and one post-divide of each shard
    divides = [k for k in flat if k.name == "aten.div_.Tensor"]
    assert len(divides) == 2 * sum(c.count("predivide") for c in planned)


def test_the_other_engines_prepare_gradients_on_the_compute_stream() -> None:
    """FSDP2's chunk_cat and yafsdp's gradient and staging copies run on the compute
    stream: no side-stream kernel precedes their reduce-scatters."""
    for label in ("fsdp2", "yafsdp"):
        assert all(c == [] for c in _chains(program(job(label, WORLD)))), label


def test_a_kernel_over_2_31_bytes_is_launched_in_pieces() -> None:
    assert split_launches(2**31 - 1, 2**31) == 1
    assert split_launches(2**31, 2**31) == 2
    assert split_launches(3 * 2**31, 2**31) == 4
    assert predivide_factor(256) == 16 and predivide_factor(64) == 8


def test_compute_ops_carry_their_kernels() -> None:
    """Each forward and backward op lists its kernels, whose times add up to the op's."""
    ops = [op for op in program(job("fsdp1", WORLD)) if op.name.split(":", 1)[1]
           .startswith(("forward.", "backward."))]  # fmt: skip
    assert ops and all(op.kernels for op in ops)
    for op in ops:
        assert sum(s for s, _ in op.kernels) == pytest.approx(op.seconds)
        assert all(waves >= 1 for _, waves in op.kernels)
