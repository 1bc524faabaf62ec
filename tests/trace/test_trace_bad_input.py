"""Traces missing what a summary needs get one line naming the file and what is missing;
events of categories from another Kineto version are ignored and counted."""

import gzip
import json

import pytest

from harness.trace import summarize_trace
from harness.trace.__main__ import main
from harness.trace.cache import cache_path, job_profile
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


# --- a job's traces that the analysis cannot handle, or that are not one per rank ---------


def _cpu_trace(path, *, rank=0, world_size=1, api="c10d::allgather_", dur=True):
    """A CPU (gloo) trace of one step: a unit annotation issuing one gloo span on a worker
    thread; `api` names the issuing call on the main thread ("" for none)."""
    events = [
        {"name": "ProfilerStep#1", "cat": "user_annotation", "tid": 1, "ts": 0, "dur": 100},
        {"name": "yafsdp.all_gather.unit0", "cat": "user_annotation", "tid": 1, "ts": 5,
         "dur": 50},
        {"name": "aten::mm", "cat": "cpu_op", "tid": 1, "ts": 10, "dur": 5},
        {"name": "gloo:all_gather", "cat": "cpu_op", "tid": 2, "ts": 20, "dur": 30},
    ]  # fmt: skip
    if api:
        events.append({"name": api, "cat": "cpu_op", "tid": 1, "ts": 16, "dur": 3})
    for e in events:
        e.update(ph="X", pid=1)
        if not dur and e["cat"] == "cpu_op":
            del e["dur"]
    info = {"rank": rank, "world_size": world_size, "backend": "gloo"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"distributedInfo": info, "traceEvents": events}))
    return path


def test_gloo_spans_without_a_known_collective_call_are_summarised(tmp_path):
    # a torch whose collective calls the classifier does not know: no issuing call at all
    trace = _cpu_trace(tmp_path / "traces" / "rank0.json", api="")
    profile = job_profile(tmp_path)
    assert "error" not in profile, profile
    assert profile["summary"]["comm_s_per_step"] > 0
    assert profile["units"][0]["comm_s"] == 0  # nothing could be attributed to the unit
    assert str(trace.relative_to(tmp_path)) in profile["traces"][0]


def test_ops_without_dur_are_the_jobs_profile_error_naming_the_file(tmp_path):
    trace = _cpu_trace(tmp_path / "traces" / "rank0.json", dur=False)
    profile = job_profile(tmp_path)
    assert set(profile) == {"error"} and str(trace) in profile["error"]
    assert "\n" not in profile["error"]


def test_an_analysis_failure_is_the_jobs_profile_error_not_the_sweeps(tmp_path, monkeypatch):
    trace = _cpu_trace(tmp_path / "traces" / "rank0.json")

    def broken(events, kind=None):
        raise IndexError("index 0 is out of bounds for axis 0 with size 0")

    monkeypatch.setattr("harness.trace.summary.classify", broken)
    profile = job_profile(tmp_path)
    assert profile["error"].startswith(f"{trace}: the trace analysis failed: IndexError: ")
    assert "\n" not in profile["error"]


def test_a_cache_entry_with_the_current_key_and_no_summary_is_redone(tmp_path):
    trace = _cpu_trace(tmp_path / "traces" / "rank0.json")
    expected = job_profile(tmp_path)
    entry = cache_path(trace)
    for junk in ([1, 2], "text", None, 3, {"summary": 1}, {"error": 7}):
        entry.write_text(json.dumps({"key": json.loads(entry.read_text())["key"], "value": junk}))
        assert job_profile(tmp_path)["summary"] == expected["summary"]


def test_a_missing_rank_is_said(tmp_path):
    _cpu_trace(tmp_path / "traces" / "rank0.json", world_size=2)
    profile = job_profile(tmp_path)
    assert "rank 1" in profile["error"] and "world_size 2" in profile["error"]
    assert str(tmp_path / "traces") in profile["error"]


def test_two_files_of_one_rank_are_said(tmp_path):
    _cpu_trace(tmp_path / "traces" / "rank0.json")
    gz = tmp_path / "traces" / "rank0.json.gz"
    gz.write_bytes(gzip.compress((tmp_path / "traces" / "rank0.json").read_bytes()))
    profile = job_profile(tmp_path)
    assert "rank0.json" in profile["error"] and "rank0.json.gz" in profile["error"]
    assert "rank 0" in profile["error"]


def test_a_copy_posing_as_another_rank_is_said(tmp_path):
    _cpu_trace(tmp_path / "traces" / "rank0.json", world_size=2)
    _cpu_trace(tmp_path / "traces" / "rank1.json", rank=0, world_size=2)  # rank 0's, copied
    profile = job_profile(tmp_path)
    assert "rank1.json" in profile["error"] and "rank 0" in profile["error"]


def test_one_trace_per_rank_is_summarised(tmp_path):
    for r in range(2):
        _cpu_trace(tmp_path / "traces" / f"rank{r}.json", rank=r, world_size=2)
    profile = job_profile(tmp_path)
    assert "error" not in profile, profile
    assert sorted(profile["per_rank"]) == ["0", "1"]


def test_the_diagnosis_reads_one_trace_per_rank_too(tmp_path):
    from harness.trace.jobs import analyse_job, attribute_job, job_cross_rank, job_traced

    _cpu_trace(tmp_path / "traces" / "rank0.json", world_size=2)
    (warning,) = job_cross_rank(tmp_path).warnings  # a partial set is said, as it was
    assert warning.startswith("only 1 of 2 ranks traced")
    _cpu_trace(tmp_path / "traces" / "rank1.json", rank=0, world_size=2)  # rank 0's, copied
    with pytest.raises(TraceError, match="holds rank 0's trace"):
        analyse_job(tmp_path)
    (tmp_path / "traces" / "rank1.json").rename(tmp_path / "traces" / "rank0.json.gz")
    for read in (attribute_job, analyse_job):
        with pytest.raises(TraceError, match=r"rank 0 has 2 trace files"):
            read(tmp_path)
    assert "rank 0 has 2 trace files" in job_traced(tmp_path)["error"]  # the cached record too


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
