"""Traces missing what a summary needs get one line naming the file and what is missing;
events of categories from another Kineto version are ignored and counted."""

import gzip
import json

import pytest

from harness.trace import summarize_trace
from harness.trace.__main__ import main
from harness.trace.parse import TraceError, load_trace
from tests.trace.synthetic import Kernel, nccl, write_gpu_trace

KERNELS = [Kernel(1, 7, 100, 50), nccl(1, 20, 120, 60), Kernel(2, 7, 300, 50)]


def _rewrite(path, change):
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    change(trace)
    with gzip.open(path, "wt") as f:
        json.dump(trace, f)
    return path


def _drop_events(trace, keep):
    trace["traceEvents"] = [e for e in trace["traceEvents"] if keep(e)]


@pytest.fixture
def trace(tmp_path):
    return write_gpu_trace(tmp_path / "rank2.json.gz", KERNELS, rank=2, world_size=4)


def test_no_profiler_step(trace):
    _rewrite(trace, lambda t: _drop_events(t, lambda e: "ProfilerStep" not in e.get("name", "")))
    with pytest.raises(TraceError) as e:
        summarize_trace(trace)
    assert str(e.value).startswith(f"{trace}: no ProfilerStep#N")
    assert "\n" not in str(e.value)


def test_gpu_run_with_only_cpu_events(trace):
    gpu = ("kernel", "gpu_memcpy", "gpu_memset")
    _rewrite(trace, lambda t: _drop_events(t, lambda e: e.get("cat") not in gpu))
    with pytest.raises(TraceError, match="only CPU events") as e:
        summarize_trace(trace)
    assert str(e.value).startswith(f"{trace}: ") and "ProfilerActivity.CUDA" in str(e.value)


def test_no_distributed_info_is_summarised_with_a_warning(trace, capsys):
    _rewrite(trace, lambda t: t.pop("distributedInfo"))
    s = summarize_trace(trace)
    assert s["rank"] == 2  # from the file name
    assert s["warnings"] == [f"{trace}: no distributedInfo; rank 2 taken from the file name"]
    assert main(["summarize", str(trace)]) == 0
    assert "no distributedInfo" in capsys.readouterr().err


def test_unknown_categories_are_ignored_and_counted(trace):
    before = summarize_trace(trace)

    def add_unknown(t):
        extra = {"ph": "X", "name": "x", "pid": 0, "tid": 7, "ts": 110, "dur": 500}
        t["traceEvents"] += [{**extra, "cat": "gpu_future_thing"}] * 3
        t["traceEvents"] += [{**extra, "cat": "cpu_future_thing", "pid": 1000, "tid": 1000}]

    _rewrite(trace, add_unknown)
    assert load_trace(trace).ignored == {"gpu_future_thing": 3, "cpu_future_thing": 1}
    after = summarize_trace(trace)
    assert after["ignored_events"] == {"gpu_future_thing": 3, "cpu_future_thing": 1}
    assert after["summary"]["ignored_events"] == 4
    assert after["steps"] == before["steps"]
    assert "cpu_future_thing (1), gpu_future_thing (3)" in after["warnings"][0]


@pytest.mark.parametrize("category", ["gpu_user_annotation", "kernel"])
def test_steps_under_another_category_are_named_not_blamed_on_prof_step(trace, category):
    def recategorise(t):
        for e in t["traceEvents"]:
            if "ProfilerStep" in e.get("name", ""):
                e["cat"] = category

    _rewrite(trace, recategorise)
    with pytest.raises(TraceError) as e:
        summarize_trace(trace)
    message = str(e.value)
    assert "prof.step() every step" not in message, message
    assert f"'{category}'" in message and "ProfilerStep#" in message, message
    assert message.startswith(f"{trace}: ") and "\n" not in message
