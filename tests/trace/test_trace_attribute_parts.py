"""The attribution's parts on hand-built data: whose a range is, what a collective's bytes
need, and the sweep's arithmetic."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from harness.trace.diagnose import causes as C
from harness.trace.diagnose.yardstick import collective_bytes, collective_kind, needed_us
from harness.trace.jobs import attribute_job
from harness.trace.overlap import merge
from harness.trace.ranges import ENGINE, MODEL, OPTIMIZER, Role, range_role
from harness.trace.sweep_line import covered, paint, segments
from tests.trace.kineto_program import write_program
from tests.trace.test_trace_attribute import N, _step


@pytest.mark.parametrize(
    "name, role",
    [
        ("yafsdp.all_gather.layers.3", Role(ENGINE, "all_gather", "layers.3")),
        ("yafsdp.all_gather.unit3", Role(ENGINE, "all_gather", "unit3")),  # an older trace's
        ("yafsdp.reduce_scatter.resident", Role(ENGINE, "reduce_scatter", "resident")),
        ("yafsdp.wait.reduce_scatter.layers.2", Role(ENGINE, "reduce_scatter", "layers.2")),
        ("yafsdp.wait.reduce_scatter.unit2", Role(ENGINE, "reduce_scatter", "unit2")),
        ("yafsdp.wait.in_flight", Role(ENGINE, "", "")),
        ("yafsdp.shard_grad.layers.2", Role(ENGINE, "", "")),
        ("yafsdp.forward.tok_embeddings", Role(MODEL, "forward", "tok_embeddings")),
        ("yafsdp.backward.layers.5", Role(MODEL, "backward", "layers.5")),
        ("FSDP::all_gather (layers.3)", Role(ENGINE, "all_gather", "layers.3")),
        ("FSDP::root_pre_forward", Role(ENGINE, "", "")),
        ("FullyShardedDataParallel.forward", Role(MODEL, "forward", "")),
        ("FullyShardedDataParallel._pre_backward_hook", Role(ENGINE, "_pre_backward_hook", "")),
        ("Optimizer.step#AdamW.step", Role(OPTIMIZER, "", "")),
        ("Optimizer.zero_grad#AdamW.zero_grad", Role(OPTIMIZER, "", "")),
        ("## forward ##", None),
        ("aten::mm", None),
    ],
)
def test_range_roles(name, role):
    assert range_role(name) == role


@pytest.mark.parametrize(
    "name, kind",
    [
        ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*)", "all_gather"),
        ("ncclKernel_ReduceScatter_RING_LL_Sum_float", "reduce_scatter"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float", "all_reduce"),
        ("gloo:all_reduce", "all_reduce"),
        ("_allgather_base", "all_gather"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", "other"),
    ],
)
def test_collective_kind(name, kind):
    assert collective_kind(name) == kind


def test_bytes_and_yardstick():
    coll = pd.DataFrame(
        {
            "in_nelems": [10, 100, -1],
            "out_nelems": [40, 100, -1],
            "dtype": ["BFloat16", "Float", "x"],
        }
    )
    nbytes = collective_bytes(coll)
    assert nbytes[:2].tolist() == [80.0, 400.0] and np.isnan(nbytes[2])
    kind = np.array(["all_gather"] * 4 + ["reduce_scatter"], dtype=object)
    size = np.array([1e6, 1e6, 1e6, np.nan, 1e6])
    dur = np.array([100.0, 150.0, 130.0, 500.0, 90.0])
    # the fastest of each kind and size; unknown bytes are their own yardstick
    assert needed_us(kind, size, dur).tolist() == [100.0, 100.0, 100.0, 500.0, 90.0]
    probe = {"all_gather": [{"bytes": 5e5, "seconds": 40e-6}, {"bytes": 2e6, "seconds": 160e-6}]}
    # the probe at 1 MB (80 us, interpolated) is stricter than the trace's fastest
    assert needed_us(kind, size, dur, probe).tolist() == pytest.approx([80, 80, 80, 500, 90])


def test_paint_gives_each_segment_its_last_laid_event():
    windows = pd.DataFrame({"step": [1], "start": [0.0], "end": [10.0]})
    start, end = np.array([0.0, 2.0, 4.0]), np.array([6.0, 3.0, 8.0])
    seg = segments([start, end], windows)
    assert seg.start.tolist() == [0, 2, 3, 4, 6, 8]
    owner = paint(seg, start, end, np.array([0, 1, 2]))
    assert owner.tolist() == [0, 1, 0, 2, 2, -1]


def test_covered_length_inside_ranges():
    iv = merge(np.array([1.0, 5.0]), np.array([3.0, 9.0]))
    assert covered(iv, np.array([0.0, 2.0, 4.0]), np.array([10.0, 6.0, 4.5])).tolist() == [
        6.0,
        2.0,
        0.0,
    ]


def test_job_dir_uses_the_bandwidth_probe(tmp_path):
    """A probe faster than every gather in the trace makes all of them partly slow."""
    job = tmp_path / "job"
    write_program(job / "traces/rank0.json.gz", [_step(), _step(), _step()])
    plain = attribute_job(job)
    assert all(s.causes[C.COMM_SLOW] == 0 for s in plain)
    probe = {"all_gather": [{"bytes": N * 4, "seconds": 40e-6}]}  # gathers take 80 us
    (job / "result.json").write_text(json.dumps({"metrics": {"bandwidth": probe}}))
    probed = attribute_job(job)
    for a, b in zip(plain, probed, strict=True):
        assert b.causes[C.COMM_SLOW] == pytest.approx(2 * 40e-6)
        assert b.step_s == a.step_s
