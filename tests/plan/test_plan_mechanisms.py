"""Each mechanism of the planner against the code or the principle it comes from.

The engines' own kernels are compared with what each engine launches in a real step (one
rank of a fake process group, `engine_capture.py`): the bytes the planner charges for a
mechanism are the bytes that engine's kernels move. The simulator's mechanisms are checked
on programs small enough to work out by hand. Each test fails without its mechanism.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from harness.models.shapes import get_shape
from harness.plan.time.mechanisms import MECHANISMS, applicable
from harness.plan.time.simulate import COMM, COMPUTE, SIDE, Op, simulate
from tests.plan.engine_capture import Kernel, fake_world, job, launched_by
from tests.plan.planned import program

WORLD = 4


def _engine_bytes(label: str, term: str, **fields: object) -> list[int]:
    """The bytes of each kernel the planner charges to `term` for one step."""
    return sorted(op.nbytes for op in program(job(label, WORLD, **fields)) if op.term == term)


def _real(label: str, **fields: object) -> list[Kernel]:
    with fake_world(WORLD):
        return launched_by(job(label, WORLD, **fields)).ops


def _label(op: Op) -> str:
    return op.name.split(":", 1)[1]


def _flat(k: Kernel) -> bool:
    """A kernel on a flat (one-dimensional) buffer: an engine's, never the model's."""
    return all(len(shape) == 1 for shape, _ in k.shapes[:1])


def test_every_mechanism_is_described_and_applies_to_some_engine() -> None:
    for name, m in MECHANISMS.items():
        assert m.what and m.source and m.engines, name
        assert any(name in applicable(e) for e in m.engines)


# ---- the engines' own kernels -------------------------------------------------------------


def test_fsdp1_flat_grad_is_one_concatenation_per_unit() -> None:
    """use_orig_params=False: each unit's flat gradient is written by one `cat` of its
    parameters' gradients."""
    real = sorted(k.nbytes for k in _real("fsdp1") if k.name == "aten.cat.default"
                  and all(len(s) == 1 for s in k.out_shapes))  # fmt: skip
    assert real and real == _engine_bytes("fsdp1", "fsdp1_flat_grad")


def test_fsdp1_upcasts_and_divides_each_gradient() -> None:
    """MixedPrecision(reduce_dtype=fp32): the flat bf16 gradient is cast to fp32 and
    divided before its reduce-scatter; the shard is divided after it."""
    ops = _real("fsdp1")
    upcasts = [k.nbytes for k in ops if k.name == "aten._to_copy.default" and _flat(k)
               and k.shapes[0][1] == "bfloat16"]  # fmt: skip
    divides = [k.nbytes for k in ops if k.name == "aten.div_.Tensor" and _flat(k)]
    shard_adds = [k.nbytes for k in ops if k.name == "aten.add_.Tensor" and _flat(k)]
    planned = _engine_bytes("fsdp1", "fsdp1_grad_upcast")
    assert len(upcasts) == len(divides) // 2 == 7  # the root, embedding, 4 blocks, output
    assert sum(planned) == pytest.approx(sum(upcasts) + sum(divides) + sum(shard_adds), rel=0.01)


def test_fsdp2_copies_in_and_out() -> None:
    """FSDP2 copies every gathered group out into its parameters and every group's
    gradients into the reduce-scatter input."""
    ops = _real("fsdp2")
    copy_out = [k.nbytes for k in ops if k.name == "fsdp.split_with_sizes_copy.default"]
    copy_in = [k.nbytes for k in ops if k.name == "fsdp.chunk_cat.default"]
    assert copy_out and copy_in
    planned = program(job("fsdp2", WORLD))
    planned_out = [o.nbytes for o in planned if _label(o).startswith("copy_out.")]
    planned_in = [o.nbytes for o in planned if _label(o).startswith("rs_copy_in.")]
    assert sorted(planned_out) == pytest.approx(sorted(copy_out), rel=0.01)
    assert sorted(planned_in) == pytest.approx(sorted(copy_in), rel=0.01)


def test_yafsdp_gradient_buffer_kernels() -> None:
    """yafsdp copies each weight's first gradient into its unit's gradient buffer (its
    post-accumulate hook), copies the buffer into the fp32 staging, and adds each reduced
    shard into the master gradient and divides it; the buffer is never zeroed whole."""
    ops = _real("yafsdp")
    engine = [k for k in ops if k.name in ("aten.zero_.default", "aten.add_.Tensor",
              "aten.copy_.default", "aten.div_.Tensor", "aten.linalg_vector_norm.default")
              and all(len(s) <= 2 for s, _ in k.shapes)]  # fmt: skip
    copies = [k for k in engine
              if k.name == "aten.copy_.default" and k.shapes[0][1] == "bfloat16"]  # fmt: skip
    assert copies, "each weight's gradient is copied into the gradient buffer"
    shape = get_shape("llama_tiny")
    smallest_unit = shape.layer_params() - 2 * shape.dim  # a layer without its norms
    whole = [k for k in engine if k.name == "aten.zero_.default" and k.shapes[0][1] == "bfloat16"
             and k.shapes[0][0][0] >= smallest_unit]  # fmt: skip
    assert whole == [], "no gradient buffer is zeroed whole"
    planned = _engine_bytes("yafsdp", "yafsdp_buffers")
    # the planner pads each unit; the resident norms' accumulation it leaves out (tiny)
    assert sum(planned) == pytest.approx(sum(k.nbytes for k in engine), rel=0.02)


# ---- the rate limiter ---------------------------------------------------------------------


@contextlib.contextmanager
def _limiter_decisions(into: list[bool]) -> Iterator[None]:
    """Record, for every `_unshard`, whether FSDP1's rate limiter took an event to wait on."""
    from torch.distributed.fsdp import _limiter_utils

    queue = _limiter_utils._FreeEventQueue
    original = queue.dequeue_if_needed

    def spy(self):  # noqa: ANN001, ANN202
        event = original(self)
        into.append(event is not None)
        return event

    queue.dequeue_if_needed = spy  # type: ignore[method-assign]
    try:
        yield
    finally:
        queue.dequeue_if_needed = original  # type: ignore[method-assign]


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_rate_limiter_waits_where_fsdp1_waits(grad_accum: int) -> None:
    """Every gather FSDP1 issues first passes `_FreeEventQueue`: with two free events
    queued, the host waits for the oldest. The planner's program makes the same check at
    the same gathers, the queue carried over from the previous step."""
    decisions: list[bool] = []
    with fake_world(WORLD):  # a few steps first: the queue's length settles
        launched_by(job("fsdp1", WORLD, grad_accum=grad_accum), steps_before=2,
                    spy=_limiter_decisions(decisions))  # fmt: skip
    planned = [op.name.endswith(".waits") for op in program(job("fsdp1", WORLD,
               grad_accum=grad_accum)) if op.term == "rate_limiter"]  # fmt: skip
    assert decisions and planned == decisions


def _op(name: str, stream: str, seconds: float, **kw: object) -> Op:
    return Op(name=name, stream=stream, seconds=seconds, term=kw.pop("term", "compute"), **kw)  # type: ignore[arg-type]


def test_a_host_wait_holds_back_what_the_host_issues_next() -> None:
    """The rate limiter's wait blocks the host (event.synchronize()), so the next unit's
    kernels are issued only once the awaited unit has finished."""
    prog = [
        _op("unit0", COMPUTE, 10e-3),
        _op("free0", COMPUTE, 0.0, term="event"),
        _op("unit1", COMPUTE, 10e-3, host_s=1e-3),
        _op("gather2", COMM, 1e-3, host_waits=("free0",), kind="all_gather"),
        _op("unit2", COMPUTE, 10e-3, host_s=15e-3, waits=("gather2",)),
    ]
    timeline = simulate(prog)
    assert timeline.issued["gather2"] == pytest.approx(10e-3)  # after unit0, not at 1 ms
    assert timeline.start["unit2"] == pytest.approx(25e-3)  # the host: 10 + 15 ms
    assert timeline.host_blocked_s == pytest.approx(9e-3)


# ---- the host, and sharing the GPU --------------------------------------------------------


def test_launch_overhead_makes_a_host_bound_step() -> None:
    """Each kernel costs the host `launch_us` to issue: with a launch cost far above the
    kernels' own time the step takes the host's time, and the term says so."""
    cfg = job("fsdp2", WORLD)
    slow = program(cfg, launch_us=5_000)
    host = sum(op.host_s for op in slow)
    assert simulate(slow).total == pytest.approx(host, rel=0.05)
    quick = program(cfg, mechanisms=frozenset(applicable("fsdp2")) - {"launch_overhead"},
                    launch_us=5_000)  # fmt: skip
    assert sum(op.host_s for op in quick) == 0
    assert simulate(quick).total < 0.1 * host


def test_nccl_sms_slow_the_compute_a_collective_overlaps() -> None:
    """While a collective runs NCCL holds nccl_sms of sm_count SMs: compute overlapping it
    runs at (sm_count - nccl_sms) / sm_count of its speed for the overlapped part."""
    prog = [_op("gather", COMM, 4e-3, kind="all_gather"), _op("gemm", COMPUTE, 10e-3)]
    slowdown = 16 / (108 - 16)
    assert simulate(prog).total == pytest.approx(10e-3)
    assert simulate(prog, overlap_slowdown=slowdown).total == pytest.approx(10e-3 + 4e-3 * slowdown)


def test_side_stream_kernels_share_the_gpu_with_compute() -> None:
    """A memory-bound kernel on a side stream shares the SMs and bandwidth of the compute
    it overlaps: together they take as long as one after the other."""
    prog = [_op("upcast", SIDE, 3e-3, term="fsdp1_grad_upcast"), _op("gemm", COMPUTE, 10e-3)]
    assert simulate(prog).total == pytest.approx(10e-3)
    assert simulate(prog, side_sharing=True).total == pytest.approx(13e-3)
