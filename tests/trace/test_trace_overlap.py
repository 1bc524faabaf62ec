"""Overlap figures on hand-made event tables with known answers."""

import math

import numpy as np
import pandas as pd
import pytest

from harness.trace.classify import COMM, COMPUTE, MEMORY, NONE, classify, detect_kind
from harness.trace.overlap import (
    Intervals,
    busy_intervals,
    clip,
    exposed_gaps,
    intersect,
    merge,
    parse_unit_annotation,
    step_table,
    step_windows,
    subtract,
    union,
)

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"


def table(rows: list[tuple]) -> pd.DataFrame:
    """rows: (name, cat, tid, ts, dur[, stream[, step[, correlation]]]) -> a parsed-trace table."""
    full = [(*r, *(-1, 1, -1)[len(r) - 5 :]) for r in rows]
    df = pd.DataFrame(
        full, columns=["name", "cat", "tid", "ts", "dur", "stream", "step", "correlation"]
    )
    df["pid"] = "1"
    df["tid"] = df["tid"].astype(str)
    for c in ("name", "cat", "pid", "tid"):
        df[c] = df[c].astype("category")
    df["ts"] = df["ts"].astype(float)
    df["dur"] = df["dur"].astype(float)
    return df


def gpu(kernels: list[tuple[str, int, float, float]], step: int = 1) -> pd.DataFrame:
    """kernels: (kind 'c'|'n'|'m', stream, start, end) in microseconds, one step."""
    rows = [("ProfilerStep#1", "user_annotation", 100, -50.0, 1.0, -1, step)]
    for kind, stream, s, e in kernels:
        name = {"c": GEMM, "n": NCCL, "m": "Memcpy DtoD (Device -> Device)"}[kind]
        cat = "gpu_memcpy" if kind == "m" else "kernel"
        rows.append((name, cat, stream, s, e - s, stream, step))
    return table(rows)


def one_step(df: pd.DataFrame) -> dict:
    rows = step_table(busy_intervals(df), step_windows(df))
    assert len(rows) == 1
    return {k: v * 1e6 if k.endswith("_s") else v for k, v in rows.iloc[0].items()}


def test_merge_joins_nested_overlapping_and_touching_intervals():
    iv = merge(np.array([5, 0, 2, 10, 30]), np.array([8, 10, 3, 20, 40]))
    assert iv.start.tolist() == [0, 30] and iv.end.tolist() == [20, 40]
    assert iv.length() == 30


def test_set_operations():
    a = merge(np.array([0, 20]), np.array([10, 30]))
    b = merge(np.array([5]), np.array([25]))
    assert intersect(a, b).length() == 10
    assert subtract(a, b).start.tolist() == [0, 25]
    assert union(a, b).length() == 30
    assert clip(a, 8, 22).length() == 4
    assert intersect(a, Intervals.empty()).length() == 0


def test_no_overlap():
    r = one_step(gpu([("c", 7, 0, 10), ("n", 20, 10, 20)]))
    assert r["overlap_s"] == pytest.approx(0)
    assert r["overlap_pct"] == pytest.approx(0)
    assert r["exposed_comm_s"] == pytest.approx(10)
    assert r["window_s"] == pytest.approx(20) and r["idle_s"] == pytest.approx(0)


def test_full_overlap():
    r = one_step(gpu([("c", 7, 0, 100), ("n", 20, 10, 50)]))
    assert r["overlap_pct"] == pytest.approx(100)
    assert r["exposed_comm_s"] == pytest.approx(0)
    assert r["compute_s"] == pytest.approx(100) and r["comm_s"] == pytest.approx(40)


def test_partial_overlap():
    r = one_step(gpu([("c", 7, 0, 30), ("n", 20, 20, 60)]))
    assert r["overlap_s"] == pytest.approx(10)
    assert r["overlap_pct"] == pytest.approx(25)
    assert r["exposed_comm_s"] == pytest.approx(30)


def test_nested_intervals_are_not_counted_twice():
    r = one_step(gpu([("c", 7, 0, 100), ("c", 8, 10, 20), ("c", 8, 30, 40), ("n", 20, 90, 110)]))
    assert r["compute_s"] == pytest.approx(100)
    assert r["overlap_pct"] == pytest.approx(50)


def test_back_to_back_intervals_touch_without_overlap():
    r = one_step(gpu([("c", 7, 0, 10), ("c", 7, 10, 20), ("n", 20, 20, 30), ("n", 20, 30, 35)]))
    assert r["compute_s"] == pytest.approx(20) and r["comm_s"] == pytest.approx(15)
    assert r["overlap_s"] == pytest.approx(0)


def test_multiple_compute_and_comm_streams():
    r = one_step(
        gpu([("c", 7, 0, 10), ("c", 8, 5, 25), ("n", 20, 0, 5), ("n", 21, 3, 30), ("m", 9, 40, 50)])
    )
    assert r["compute_s"] == pytest.approx(25) and r["comm_s"] == pytest.approx(30)
    assert r["overlap_pct"] == pytest.approx(100 * 25 / 30)
    assert r["memcpy_s"] == pytest.approx(10)
    assert r["idle_s"] == pytest.approx(10)  # [30, 40)


def test_step_without_communication_has_no_overlap_percentage():
    r = one_step(gpu([("c", 7, 0, 10)]))
    assert math.isnan(r["overlap_pct"]) and r["comm_s"] == 0


def test_gpu_windows_tile_steps_and_clip_kernels_that_cross_them():
    df = pd.concat([gpu([("c", 7, 0, 10), ("n", 20, 5, 30)], 1), gpu([("c", 7, 20, 40)], 2)])
    w = step_windows(df)
    assert w[["start", "end"]].values.tolist() == [[0, 20], [20, 40]]
    rows = step_table(busy_intervals(df), w)
    assert (rows["comm_s"] * 1e6).tolist() == pytest.approx([15, 10])
    assert (rows["overlap_s"] * 1e6).tolist() == pytest.approx([5, 10])


def test_cpu_classification_main_thread_ops_and_gloo_threads():
    df = table(
        [
            ("ProfilerStep#1", "user_annotation", 1, 0, 100),
            ("aten::linear", "cpu_op", 1, 0, 40),
            ("aten::addmm", "cpu_op", 1, 10, 20),  # nested: counted once
            ("c10d::allreduce_", "cpu_op", 1, 40, 10),  # issuing a collective is not compute
            ("aten::empty", "cpu_op", 1, 42, 2),  # child of the collective call
            ("aten::mm", "cpu_op", 1, 50, 30),
            ("gloo:all_reduce", "user_annotation", 2, 45, 20),  # gloo worker thread
            ("gloo:all_reduce", "user_annotation", 3, 85, 10),
            ("aten::mm", "cpu_op", 4, 0, 100),  # another thread's ops are not the main loop
        ]
    )
    assert detect_kind(df) == "cpu"
    labels = classify(df)
    assert labels.tolist() == [NONE, COMPUTE, COMPUTE, NONE, COMPUTE, COMPUTE, COMM, COMM, NONE]
    r = one_step(df)
    assert r["compute_s"] == pytest.approx(70)  # [0,40) + [50,80); the call [40,50) cut out
    assert r["comm_s"] == pytest.approx(30)
    assert r["overlap_s"] == pytest.approx(15)  # [50, 65)
    assert r["exposed_comm_s"] == pytest.approx(15)
    assert r["idle_s"] == pytest.approx(100 - 70 - 15)


def test_cpu_autograd_wrappers_count_only_their_operators():
    """An engine hook that waits for a collective inside a backward node is not computing."""
    df = table(
        [
            ("ProfilerStep#1", "user_annotation", 1, 0, 100),
            ("autograd::engine::evaluate_function: AddBackward0", "cpu_op", 1, 0, 100),
            ("AddBackward0", "cpu_op", 1, 1, 98),
            ("aten::mm", "cpu_op", 1, 10, 10),
            ("RegisterPostBackwardFunctionBackward", "cpu_op", 1, 25, 70),
            ("torch::autograd::AccumulateGrad", "cpu_op", 1, 90, 5),
            ("aten::add_", "cpu_op", 1, 91, 3),
            ("gloo:all_gather", "user_annotation", 2, 30, 50),
        ]
    )
    assert classify(df).tolist() == [NONE, NONE, NONE, COMPUTE, NONE, NONE, COMPUTE, COMM]
    r = one_step(df)
    assert r["compute_s"] == pytest.approx(13)
    assert r["overlap_s"] == pytest.approx(0) and r["exposed_comm_s"] == pytest.approx(50)


def test_memory_kernels_are_neither_compute_nor_comm():
    df = gpu([("m", 9, 0, 10), ("c", 7, 0, 5), ("n", 20, 0, 10)])
    assert classify(df).tolist() == [NONE, MEMORY, COMPUTE, COMM]


def test_exposed_gaps_are_sorted_largest_first():
    df = gpu([("c", 7, 0, 10), ("n", 20, 5, 12), ("c", 7, 20, 30), ("n", 20, 30, 50)])
    gaps = exposed_gaps(busy_intervals(df), step_windows(df))
    assert (gaps["exposed_s"] * 1e6).tolist() == pytest.approx([20, 2])
    assert gaps["offset_s"].iloc[0] * 1e6 == pytest.approx(30)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("yafsdp.all_gather.layers.12", ("all_gather", "layers.12")),
        ("yafsdp.reduce_scatter.tok_embeddings", ("reduce_scatter", "tok_embeddings")),
        ("yafsdp.all_gather.unit12", ("all_gather", "unit12")),  # an older trace's, as it is
        ("FSDP::all_gather (layers.3)", ("all_gather", "layers.3")),
        ("FullyShardedDataParallel.forward", ("forward", "")),
        ("aten::mm", None),
    ],
)
def test_unit_annotations(name, expected):
    assert parse_unit_annotation(name) == expected
