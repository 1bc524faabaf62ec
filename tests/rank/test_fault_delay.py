"""fault.kind=delay: refused before launch when it cannot work; sleeps inside the range."""

import time

import pytest
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

from harness.config import FaultConfig, JobConfig
from harness.engines.registry import ENGINES
from harness.rank.faults import DELAY_RANGE, in_range, maybe_inject
from harness.validate import validation_errors
from harness.validate.ranges import DELAY_HOOKS


def _cfg(label: str = "yafsdp", **fault) -> JobConfig:
    return JobConfig(engine=ENGINES[label].config(), fault=FaultConfig(**fault))


def test_a_good_delay_passes():
    assert validation_errors(_cfg(kind="delay", where="yafsdp.reduce_scatter", ms=20)) == []
    assert validation_errors(_cfg("fsdp2", kind="delay", where="FSDP::all_gather", ms=1)) == []


def test_unknown_where_lists_the_engines_choices():
    (error,) = validation_errors(_cfg("fsdp1", kind="delay", where="yafsdp.forward", ms=20))
    assert error.startswith("fault.where='yafsdp.forward' is not a range of engine.name=fsdp1")
    assert all(hook in error for hook in DELAY_HOOKS["fsdp1"])


def test_delay_needs_positive_ms_and_an_engine_with_ranges():
    (error,) = validation_errors(_cfg(kind="delay", where="yafsdp.forward", ms=0))
    assert error == "fault.ms=0 must be more than 0 milliseconds"
    errors = validation_errors(_cfg("local", kind="delay", where="x", ms=-1))
    assert any("needs an engine with named ranges" in e for e in errors)
    assert any("fault.ms=-1" in e for e in errors)


def test_where_and_ms_without_delay_are_refused():
    (error,) = validation_errors(_cfg(kind="crash", where="yafsdp.forward"))
    assert "read by fault.kind=delay only" in error


def test_in_range_matches_units_and_modules_only():
    assert in_range("yafsdp.forward.layers.3", "yafsdp.forward")
    assert in_range("yafsdp.forward.unit3", "yafsdp.forward")  # an older run's name
    assert in_range("FSDP::all_gather (layers.0)", "FSDP::all_gather")
    assert in_range(
        "FullyShardedDataParallel._pre_forward", "FullyShardedDataParallel._pre_forward"
    )
    assert not in_range("yafsdp.forward_x", "yafsdp.forward")
    assert not in_range("FSDP::all_gather_copy_out (layers.0)", "FSDP::all_gather")


def test_the_chosen_rank_sleeps_once_a_step_inside_the_range():
    fault = FaultConfig(kind="delay", where="yafsdp.reduce_scatter", ms=30, rank=1, step=2)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for step in range(4):
            maybe_inject(fault, rank=0, step=step)  # another rank: never
            maybe_inject(fault, rank=1, step=step)
            for unit in range(2):
                with record_function(f"yafsdp.reduce_scatter.unit{unit}"):
                    pass
            with record_function("yafsdp.forward.unit0"):
                pass
    events = [e for e in prof.events() if e.name in (DELAY_RANGE, "yafsdp.reduce_scatter.unit0")]
    delays = [e for e in events if e.name == DELAY_RANGE]
    assert len(delays) == 2  # steps 2 and 3, not 0 and 1
    for d in delays:
        assert d.time_range.elapsed_us() == pytest.approx(30e3, rel=0.5)
        assert any(
            e.name == "yafsdp.reduce_scatter.unit0"
            and e.time_range.start <= d.time_range.start
            and d.time_range.end <= e.time_range.end
            for e in events
        )
    start = time.perf_counter()
    with record_function("yafsdp.reduce_scatter.unit0"):  # disarmed until the next step
        pass
    assert time.perf_counter() - start < 0.02
