"""Parsing Chrome traces: streamed decoding, step assignment, clear errors for bad files."""

import gzip
import json

import pytest

from harness.trace import parse
from harness.trace.parse import TraceError, load_trace
from tests.trace.synthetic import Kernel, nccl, write_gpu_trace

KERNELS = [Kernel(1, 7, 100, 50), nccl(1, 20, 120, 60), Kernel(2, 7, 300, 50)]


@pytest.fixture
def gpu_trace(tmp_path):
    return write_gpu_trace(tmp_path / "rank3.json.gz", KERNELS, rank=3, world_size=4)


def test_gpu_trace_columns_steps_and_rank(gpu_trace):
    t = load_trace(gpu_trace)
    assert t.rank == 3
    ev = t.events
    kernels = ev[ev["cat"] == "kernel"]
    assert kernels["stream"].tolist() == [7, 20, 7]
    assert kernels["step"].tolist() == [1, 1, 2]  # through the launch's correlation id
    launches = ev[ev["name"] == "cudaLaunchKernel"]
    assert (launches["stream"] == -1).all() and (launches["correlation"] > 0).all()


def test_small_read_chunks_give_the_same_table(gpu_trace, monkeypatch):
    whole = load_trace(gpu_trace).events
    monkeypatch.setattr(parse, "_CHUNK_CHARS", 7)  # every value straddles chunk boundaries
    assert load_trace(gpu_trace).events.equals(whole)


def test_plain_json_and_array_format(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": 2},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 1, "tid": 1,
         "ts": 0, "dur": 10},
        {"ph": "i", "name": "instant", "pid": 1, "tid": 1, "ts": 3},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
    ]  # fmt: skip
    (tmp_path / "a.json").write_text(json.dumps(events))
    (tmp_path / "o.json").write_text(json.dumps({"traceEvents": events, "traceName": "x"}))
    for name in ("a.json", "o.json"):
        t = load_trace(tmp_path / name)
        assert t.events["name"].tolist() == ["aten::mm", "ProfilerStep#4"]
        assert t.events["step"].tolist() == [4, 4]
        assert t.thread_names == {("1", "1"): "main"}
    assert load_trace(tmp_path / "o.json").metadata == {"traceName": "x"}


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty trace file"),
        (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}, {"ph": "X", "na',
         "truncated or corrupt"),
        (b'{"traceEvents": [}', "truncated or corrupt"),
        (b'{"schemaVersion": 1}', "no traceEvents"),
        (b'{"traceEvents": []}', "no complete"),
        (b"\xff\xfe garbage", "unreadable"),
    ],
)  # fmt: skip
def test_bad_files_raise_trace_error_naming_the_file(tmp_path, content, message):
    path = tmp_path / "rank0.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as e:
        load_trace(path)
    assert str(path) in str(e.value)


def test_truncated_gzip_names_the_file(gpu_trace):
    data = gpu_trace.read_bytes()
    gpu_trace.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="truncated or corrupt") as e:
        load_trace(gpu_trace)
    assert str(gpu_trace) in str(e.value)


def test_gzip_of_truncated_json_names_the_file(tmp_path):
    path = tmp_path / "rank1.json.gz"
    with gzip.open(path, "wt") as f:
        f.write('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2},')
    with pytest.raises(TraceError, match=f"{path}: truncated or corrupt"):
        load_trace(path)


def test_not_gzip_but_named_gz(tmp_path):
    path = tmp_path / "rank0.json.gz"
    path.write_text("{}")
    with pytest.raises(TraceError, match=str(path)):
        load_trace(path)


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace(tmp_path / "nope.json")
