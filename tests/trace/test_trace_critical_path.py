"""The critical path on hand-built GPU traces with CUDA sync events (and without them)."""

import json

import pytest

from harness.trace.__main__ import main
from harness.trace.diagnose.critical_path import (
    RankGraph,
    critical_path,
    path_lines,
    read_syncs,
)
from harness.trace.jobs import job_critical_paths
from harness.trace.parse import load_trace
from tests.trace.sync_traces import CAST, GEMM, REDUCE_SCATTER, Op, give_way_ops, write_sync_trace


def _path(tmp_path, ops, step, window, *, sync_events=True):
    p = write_sync_trace(tmp_path / "rank0.json", ops, step, sync_events=sync_events)
    return critical_path({0: RankGraph(load_trace(p), read_syncs(p), 0)}, 0, 1, window)


def test_give_way_chain_is_the_whole_step_with_sync_events(tmp_path):
    path = _path(tmp_path, give_way_ops(), (0.0, 610.0), (20.0, 600.0))
    assert path.agrees and path.path_s == pytest.approx(580e-6)
    chain = [(s.name, s.via) for s in path.segments]
    assert chain == [
        (GEMM, ""),  # the last GEMM, which waited for the reduce-scatter
        (REDUCE_SCATTER, "stream wait"),
        (CAST, "stream wait"),  # the reduce-scatter waited for the second cast
        (CAST, "stream order"),
        (GEMM, "stream wait"),  # the casts waited behind the third GEMM
        (GEMM, "stream order"),
        (GEMM, "stream order"),
    ]
    assert path_lines(path)[0].startswith("rank 0 step 1: the critical path covers 100.0%")


def test_without_sync_events_the_path_says_it_does_not_split_the_step(tmp_path):
    path = _path(tmp_path, give_way_ops(), (0.0, 610.0), (20.0, 600.0), sync_events=False)
    assert not path.agrees
    assert path.path_s == pytest.approx(360e-6)  # the GEMMs only; 220 us no edge explains
    assert "covers only 62.1% of the step" in path.verdict()
    assert "edges are missing" in path.verdict()
    assert path_lines(path)[-1] == "  gaps no edge explains: 0.220 ms"


def test_a_late_launch_puts_the_host_on_the_path(tmp_path):
    ops = [
        Op("kernel", 7, 1.0, 20.0, 80.0),
        Op("cpu", -1, 5.0, dur=290.0, name="aten::nonzero"),  # the host is busy until 295
        Op("kernel", 7, 296.0, 300.0, 100.0),
    ]
    path = _path(tmp_path, ops, (0.0, 410.0), (20.0, 400.0))
    assert [(s.what, s.name) for s in path.segments][:3] == [
        ("kernel", GEMM), ("edge", "launch"), ("host", "cudaLaunchKernel")
    ]  # fmt: skip
    assert ("host", "aten::nonzero") in [(s.what, s.name) for s in path.segments]
    assert path.agrees


def test_a_host_synchronisation_links_the_device_back(tmp_path):
    ops = [
        Op("kernel", 7, 1.0, 20.0, 180.0),
        Op("sync", 7, 2.0, dur=199.0),  # returns at 201, 1 us after the kernel
        Op("kernel", 7, 202.0, 205.0, 95.0),
    ]
    path = _path(tmp_path, ops, (0.0, 310.0), (20.0, 300.0))
    assert path.agrees and path.path_s == pytest.approx(280e-6)
    vias = [(s.name, s.via) for s in path.segments]
    assert ("cudaStreamSynchronize (returns)", "host order") in vias
    assert (GEMM, "synchronisation") in vias


def test_across_ranks_the_path_goes_to_the_rank_that_arrived_last(tmp_path):
    """Rank 1's GEMM is 150 us longer, so both ranks' reduce-scatters wait for it; rank 1's
    clock runs 1 ms ahead."""
    for rank, gemm, offset in ((0, 100.0, 0.0), (1, 250.0, 1000.0)):
        ops = [
            Op("kernel", 7, 1.0 + offset, 20.0 + offset, gemm),
            Op("record", 7, 2.0 + offset),
            Op("wait", 20, 3.0 + offset, wait_on=7),
            Op("kernel", 20, 4.0 + offset, 20.0 + gemm + offset, 300.0 - gemm, REDUCE_SCATTER),
            Op("record", 20, 5.0 + offset),
            Op("wait", 7, 6.0 + offset, wait_on=20),
            Op("kernel", 7, 7.0 + offset, 320.0 + offset, 80.0),
        ]
        write_sync_trace(tmp_path / f"traces/rank{rank}.json", ops, (offset, 410.0 + offset),
                         rank=rank, world_size=2)  # fmt: skip
    paths = {p.rank: p for p in job_critical_paths(tmp_path)}
    assert paths[0].agrees and paths[1].agrees
    segments = [(s.rank, s.name, s.via) for s in paths[0].segments]
    assert segments[:3] == [
        (0, GEMM, ""),
        (0, f"{REDUCE_SCATTER} (transfer after rank 1 arrived last)", "stream wait"),
        (1, GEMM, "stream wait"),  # rank 1's GEMM, reached through its own reduce-scatter
    ]
    assert paths[0].segments[2].seconds == pytest.approx(250e-6)
    assert paths[0].path_s == pytest.approx(380e-6)  # 80 + 50 transfer + 250


def test_cli_prints_each_steps_path(tmp_path, capsys):
    write_sync_trace(tmp_path / "traces/rank0.json", give_way_ops(), (0.0, 610.0))
    assert main(["path", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rank 0 step 1: the critical path covers 100.0% of the step")
    assert "<- stream wait" in out
    assert main(["path", str(tmp_path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["agrees"] and row["path_s"] == pytest.approx(580e-6)
