"""The caching allocator's per-stream pools (`harness.plan.memory.allocator`): reserved memory and
retries on hand-built steps whose answers are worked out by hand, and in the planner's row."""

from __future__ import annotations

import pytest

from harness.plan.memory.allocator import estimate_allocator, run_pools, stream_demand

# Two moments of a hand-built FSDP1 step, bytes by memory class (units of 1 byte):
# forward holds activations and one gathered unit; backward's end holds the fp32 gradient
# copy on the post-backward stream.
MOMENTS = {
    "forward: layers.0": {"activations_plain": 10, "unsharded_weights": 2, "overhead": 1},
    "backward: layers.0 reduce": {"activations_plain": 2, "unsharded_weights": 2,
                                 "staging": 8, "overhead": 1},
}  # fmt: skip


def test_fsdp1_allocates_on_three_streams_and_overhead_in_none() -> None:
    demand = stream_demand(MOMENTS["backward: layers.0 reduce"], "fsdp1")
    assert demand == {"compute": 2, "unshard": 2, "post_backward": 8}


def test_fsdp1_reserves_the_sum_of_its_streams_peaks() -> None:
    """Allocated peaks at 12 (+1 outside); each pool keeps its own peak: 10 + 2 + 8."""
    got = estimate_allocator(MOMENTS, "fsdp1", None)
    assert got is not None
    assert got.allocated_peak_bytes == 13 and got.reserved_bytes == 21
    assert got.stream_peaks == {"compute": 10, "unshard": 2, "post_backward": 8}
    assert got.retries_per_step == 0 and got.fits


def test_one_stream_engines_reserve_what_they_allocate() -> None:
    for engine in ("yafsdp", "local"):
        got = estimate_allocator(MOMENTS, engine, None)
        assert got is not None and got.reserved_bytes == got.allocated_peak_bytes == 13


def test_pools_past_the_device_retry_twice_a_step() -> None:
    """Device 16, 1 outside: pools may hold 15. Step 1: compute 10 + unshard 2; at the
    reduce the post-backward pool needs 8 (12 + 8 > 15): retry, pools shrink to what is
    used (2 + 2), then 8. Step 2 (steady): compute needs 10 again with 2 + 8 cached: retry;
    at the reduce, 8 more with 12 cached: retry. Two per step."""
    got = estimate_allocator(MOMENTS, "fsdp1", 16)
    assert got is not None and got.fits
    assert got.retries_per_step == 2
    assert got.retry_moments == ("forward: layers.0", "backward: layers.0 reduce")
    assert got.reserved_bytes <= 16


def test_room_for_every_pool_means_no_retry() -> None:
    got = estimate_allocator(MOMENTS, "fsdp1", 21)
    assert got is not None and got.retries_per_step == 0 and got.reserved_bytes == 21


def test_an_allocated_peak_past_the_device_does_not_fit() -> None:
    got = estimate_allocator(MOMENTS, "fsdp1", 12)
    assert got is not None and not got.fits and got.retries_per_step == 0


def test_the_first_step_alone_would_undercount() -> None:
    demands = [(n, stream_demand(m, "fsdp1")) for n, m in MOMENTS.items()]
    _, steady = run_pools(demands, 15)
    assert steady == ["forward: layers.0", "backward: layers.0 reduce"]


def test_fsdp2_reserves_its_gather_copy_in_and_reduce_scatter_pools() -> None:
    """FSDP2's all-gather output lives in its copy-in stream's pool beside the compute
    stream's unsharded parameters (one class in the memory model, two copies in the
    pools), and its reduce-scatter buffers in the reduce-scatter stream's pool: allocated
    peaks at 12 (+1 outside), reserved is compute 10 + copy-in 2 + reduce-scatter 8."""
    for engine in ("fsdp2", "fsdp2_tuned"):
        got = estimate_allocator(MOMENTS, engine, None)
        assert got is not None
        assert got.allocated_peak_bytes == 13 and got.reserved_bytes == 23
        assert got.stream_peaks == {"compute": 12, "all_gather_copy_in": 2, "reduce_scatter": 8}


@pytest.mark.parametrize("engine", ["fsdp1", "fsdp2"])
def test_the_plan_row_flags_retries_between_allocated_and_reserved(engine: str) -> None:
    """A device between FSDP1's allocated peak and its reserved memory: it fits, yet the
    allocator retries, and the row and yafsdp's why-lines say so."""
    from dataclasses import replace

    from harness.plan.cli import job_configs
    from harness.plan.memory.model import moments_by_class
    from harness.plan.planner import add_speedups, memory_case, plan_row

    point = ["hardware=a100_80gb", "model=llama_small", "gpus=8", "seq_len=512"]
    cfgs = {c.engine.label: c for c in job_configs([*point, f"engine=yafsdp,{engine}"])}
    free = estimate_allocator(moments_by_class(memory_case(cfgs[engine])), engine, None)
    assert free is not None and free.reserved_bytes > free.allocated_peak_bytes
    between = (free.reserved_bytes + free.allocated_peak_bytes) / 2 / 2**30
    rows = [plan_row(replace(c, device_memory_gb=between)) for c in cfgs.values()]
    add_speedups(rows)
    fsdp1 = next(r for r in rows if r.cfg.engine.label == engine)
    assert fsdp1.fits and fsdp1.allocator is not None and fsdp1.allocator.retries_per_step >= 1
    yafsdp = next(r for r in rows if r.cfg.engine.label == "yafsdp")
    assert any("allocator retries a step" in line for line in yafsdp.why[engine])
    # priced as a term of its own, and switched off the step is that much shorter
    assert fsdp1.time is not None
    price = fsdp1.to_dict()["allocator"]["retry_s"]
    assert price is not None and price >= 0
    assert fsdp1.time.breakdown["allocator retries"] == price
    unpriced = plan_row(replace(cfgs[engine], device_memory_gb=between), price_retries=False)
    assert unpriced.time is not None and "allocator retries" not in unpriced.time.breakdown
    assert fsdp1.time.iteration_time_s == pytest.approx(unpriced.time.iteration_time_s + price)


# ---- a retry's price: the device synchronisation in the program ---------------------------


def test_moments_map_onto_fsdp1_program_labels() -> None:
    from harness.plan.time.retry_syncs import program_label

    assert program_label("forward: layers.3") == "forward.layers.3"
    assert program_label("forward: loss") == "forward.output"
    assert program_label("backward: projection") == "backward.output"
    assert program_label("backward: layers.7 reduce") == "grads_done.layers.7"
    assert program_label("backward: output reduce") == "grads_done.output"
    assert program_label("backward: tok_embeddings") == "backward.tok_embeddings"
    assert program_label("after backward: all-reduce") is None


def test_a_retry_exposes_the_collective_in_flight() -> None:
    """By hand: a 3 s reduce-scatter is issued, then block 1's 1 s backward, then block 0's.
    Unsynchronised, block 0 follows block 1 (ends at 2 s) and the step ends with the
    collective at 3 s. A retry as block 0 is issued blocks the host until the collective
    ends: block 0 runs 3-4 s, the step ends at 4 s: 1 s exposed."""
    from harness.plan.time.retry_syncs import exposed_s, with_retry_syncs
    from harness.plan.time.simulate import COMM, COMPUTE, Op

    program = [
        Op("1:reduce_scatter.layers.2", COMM, 3.0, "comm"),
        Op("2:backward.layers.1", COMPUTE, 1.0, "compute"),
        Op("3:backward.layers.0", COMPUTE, 1.0, "compute"),
    ]
    synced = with_retry_syncs(program, ["backward: layers.0"])
    assert [op.name for op in synced][2] == "retry:3:backward.layers.0"
    assert synced[2].host_waits == ("2:backward.layers.1", "1:reduce_scatter.layers.2")
    assert exposed_s(program, ["backward: layers.0"]) == pytest.approx(1.0)
    assert exposed_s(program, []) == 0.0
