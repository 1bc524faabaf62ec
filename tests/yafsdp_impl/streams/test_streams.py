"""The engine's CUDA stream branch, run on CPU: no buffer is touched by both streams without
an event between, and removing either direction of waiting is caught.

See `run.py` for how the branch is taken without a GPU, `race_log.py` for the rule, and
`fake_cuda.py` for the stand-in `torch.cuda` (every call bound to the real signature).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from tests.host_syncs import HostSyncs, optimizer_step_counters
from tests.yafsdp_impl.streams.fake_cuda import FakeCuda
from tests.yafsdp_impl.streams.race_log import AccessLog
from tests.yafsdp_impl.streams.run import Case, Outcome, run_case
from yafsdp_impl import Schedule

MATRIX = [
    Case(param_dtype=dtype, grad_accum_steps=accum, prefetch=prefetch)
    for dtype, accum, prefetch in itertools.product(
        (torch.bfloat16, torch.float32), (1, 2), (True, False)
    )
]
# The other weight-buffer plans lend their buffers to the reduce-scatters differently;
# checkpointing re-runs a unit's forward inside backward.
PLANS = [Case(buffer_plan=plan) for plan in ("alternating", "ends_shared", "separate_ends")]
EXTRA = [
    *PLANS,
    Case(ckpt_units=2, grad_accum_steps=2),
    Case(reduce_dtype=torch.bfloat16, grad_accum_steps=2),
    Case(clip=False),  # the norms' all-reduce is then waited for by the next step
]
# A state dict saved and loaded between steps, while prefetched gathers may be in flight.
RELOADS = [
    Case(reload="full"),
    Case(reload="local"),
    Case(param_dtype=torch.float32, reload="full"),
]


@pytest.fixture(params=[1, 3, 8], ids=lambda p: f"world{p}")
def world(request: pytest.FixtureRequest) -> Iterator[int]:
    """One gloo rank (real collectives), or rank 0 of a fake group of 3 or 8."""
    p = request.param
    if p == 1:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    else:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=p)
    yield p
    dist.destroy_process_group()


def _describe(outcome: Outcome) -> str:
    return "\n".join(str(r) for r in outcome.races[:10])


def _took_the_stream_branch(outcome: Outcome) -> None:
    assert outcome.kernels.get("comm", 0) > 0, "no collective ran on the communication stream"
    assert outcome.kernels.get("compute", 0) > 0
    assert "compute.wait_event" in outcome.cuda_calls
    assert "comm.wait_event" in outcome.cuda_calls


@pytest.mark.parametrize("case", MATRIX, ids=str)
def test_no_buffer_is_touched_by_both_streams_without_an_event(
    case: Case, world: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcome = run_case(case, monkeypatch)
    _took_the_stream_branch(outcome)
    assert outcome.races == [], _describe(outcome)


@pytest.mark.parametrize("case", EXTRA, ids=str)
def test_other_plans_and_checkpointing_have_no_race(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=3)
    try:
        outcome = run_case(case, monkeypatch)
    finally:
        dist.destroy_process_group()
    _took_the_stream_branch(outcome)
    assert outcome.races == [], _describe(outcome)


@pytest.mark.parametrize("world", [1, 3], indirect=True, ids=lambda p: f"world{p}")
@pytest.mark.parametrize("case", RELOADS, ids=str)
def test_loading_weights_waits_for_the_prefetched_gathers(
    case: Case, world: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state dict loaded after `prefetch_after` started the next step's gathers: they
    read the master (fp32) or its param-dtype copy, which the load and the next step's copy
    overwrite, so the load waits for them first."""
    outcome = run_case(case, monkeypatch)
    assert outcome.races == [], _describe(outcome)


@pytest.mark.parametrize("world", [3], indirect=True, ids=lambda p: f"world{p}")
def test_gathers_left_in_flight_are_seen(world: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without `wait_in_flight`, the host's read after the last step meets the gathers
    `prefetch_after` started: the harness's last check is not vacuous."""
    monkeypatch.setattr(Schedule, "wait_in_flight", lambda self: None)
    outcome = run_case(Case(prefetch=True), monkeypatch)
    assert outcome.races
    assert {r.then.op for r in outcome.races} == {"read after wait_in_flight"}
    assert {r.storage for r in outcome.races} >= {"weight buffer 0", "resident weight"}


@pytest.mark.parametrize("world", [1], indirect=True, ids=lambda p: f"world{p}")
def test_lent_weight_buffers_are_read_by_reduce_scatters(
    world: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lending of weight buffers to the reduce-scatters is on the path checked above:
    with fp32 weights their lanes fit, and the communication stream reads them."""
    outcome = run_case(Case(param_dtype=torch.float32), monkeypatch)
    for k in (0, 1):
        assert ("comm", f"weight buffer {k}", "reduce_scatter (collective)") in outcome.touched
    assert outcome.races == [], _describe(outcome)


@pytest.mark.parametrize("world", [1, 3], indirect=True, ids=lambda p: f"world{p}")
@pytest.mark.parametrize("dropped", ["comm", "compute"])
def test_removing_one_direction_of_waiting_is_a_race(
    dropped: str, world: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the communication stream's waits (comm after compute) a gather overwrites
    weights compute still reads; without compute's waits (compute after comm) compute reads
    weights before their gather lands. Either way races are reported, on the stream whose
    waits were dropped."""
    outcome = run_case(Case(), monkeypatch, drop_waits_of=frozenset({dropped}))
    assert outcome.races, f"dropping the {dropped} stream's waits went unseen"
    assert all(r.then.stream == dropped for r in outcome.races)
    storages = {r.storage for r in outcome.races}
    assert any(s.startswith("weight buffer") for s in storages), storages


@pytest.mark.parametrize("world", [1, 3], indirect=True, ids=lambda p: f"world{p}")
def test_the_stream_branch_never_waits_on_the_host(
    world: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On CUDA every wait of the engine is a stream's: no op of its steps (clipping and the
    optimizer step included) reads a device value back."""
    syncs: list[HostSyncs] = []

    def watch(optimizer: torch.optim.Optimizer) -> HostSyncs:
        syncs.append(HostSyncs(exempt=lambda: optimizer_step_counters(optimizer)))
        return syncs[-1]

    outcome = run_case(Case(grad_accum_steps=2), monkeypatch, watch=watch)
    _took_the_stream_branch(outcome)
    assert [str(s) for s in syncs[0].found] == []


# ---- the stand-in itself -----------------------------------------------------------------


def test_the_fake_refuses_what_torch_cuda_refuses() -> None:
    cuda = FakeCuda()
    with pytest.raises(TypeError):
        cuda.Event(timing=True)  # the real keyword is enable_timing
    with pytest.raises(TypeError):
        cuda.Stream(torch.device("cuda", 0), -1, 3)  # one positional too many
    with pytest.raises(TypeError, match="cpu device"):
        cuda.current_stream(torch.device("cpu"))
    stream, event = cuda.Stream(torch.device("cuda", 0), priority=-1), cuda.Event()
    with pytest.raises(TypeError, match="not a FakeEvent"):
        stream.wait_event(stream)
    with pytest.raises(TypeError):
        event.record(stream, stream)
    with pytest.raises(AssertionError, match="never recorded"):
        stream.wait_event(event)


def test_the_log_orders_accesses_by_events_only() -> None:
    """Write on comm, read on compute: a race until compute waits on an event recorded
    after the write; byte ranges that do not overlap never race."""
    cuda = FakeCuda()
    log = AccessLog(cuda)
    buf = torch.zeros(8)
    log.track("buf", buf)
    comm = cuda.Stream()
    with cuda.stream(comm):
        log.kernel("gather", [], [buf[:4]])
        done = cuda.Event()
        done.record(comm)
    log.kernel("disjoint read", [buf[4:]], [])
    assert log.races == []
    log.kernel("early read", [buf[:2]], [])
    assert [r.then.op for r in log.races] == ["early read"]
    cuda.current_stream().wait_event(done)
    log.kernel("late read", [buf[:4]], [])
    assert [r.then.op for r in log.races] == ["early read"]
