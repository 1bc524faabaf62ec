"""yafsdp's annotation names come from one torch-free module, and every collective the engine
annotates reaches the per-unit table: the units', the resident unit's and the clipping's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.trace import load_trace
from harness.trace.overlap import busy_intervals, parse_unit_annotation, unit_table
from tests.trace.synthetic import AUTOGRAD_TID, Kernel, nccl, write_gpu_trace
from yafsdp_impl import annotation_names as names

ROOT = Path(__file__).resolve().parents[2]


def test_annotation_names_import_no_torch() -> None:
    code = (
        "import sys, yafsdp_impl.annotation_names as n; "
        "assert n.parse(n.collective('all_gather', 'layers.3')) == ('all_gather', 'layers.3'); "
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'torch'); "
        "assert not loaded, loaded"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr


def test_the_package_still_exports_the_engine() -> None:
    from yafsdp_impl import YaFSDP, byte_classes, held_bytes, is_norm
    from yafsdp_impl._api import YaFSDP as FromApi

    assert YaFSDP is FromApi and callable(byte_classes) and callable(held_bytes)
    assert callable(is_norm)
    with pytest.raises(AttributeError, match="no_such_name"):
        import yafsdp_impl

        _ = yafsdp_impl.no_such_name  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "name, expected",
    [
        (names.collective("all_gather", "layers.12"), ("all_gather", "layers.12")),
        (
            names.collective("reduce_scatter", "tok_embeddings"),
            ("reduce_scatter", "tok_embeddings"),
        ),
        (names.collective("all_gather", "model.layers.3"), ("all_gather", "model.layers.3")),
        # a trace written before units were named by path: the name as it is
        ("yafsdp.all_gather.unit12", ("all_gather", "unit12")),
        (names.collective("all_gather", names.unit_name(0)), ("all_gather", "unit0")),
        (names.collective("all_gather", names.RESIDENT), ("all_gather", "resident")),
        (names.collective("reduce_scatter", names.RESIDENT), ("reduce_scatter", "resident")),
        (names.collective("all_reduce", names.CLIP), ("all_reduce", "clip")),
        (names.forward("layers.4"), ("forward", "layers.4")),
        (names.backward("output"), ("backward", "output")),
        # waits issue nothing: they are not rows of the unit table
        (names.wait("all_gather", "layers.3"), None),
        (names.wait("all_reduce", names.CLIP), None),
        (names.wait_in_flight(), None),
        ("yafsdp.all_gather.", None),
        ("yafsdp.all_gather.layers.", None),
        ("yafsdp.all_gather.layers..3", None),
        ("yafsdp.broadcast.layers.1", None),
    ],
)
def test_the_engine_names_parse_back(name: str, expected: tuple[str, str] | None) -> None:
    assert names.parse(name) == expected
    assert parse_unit_annotation(name) == expected


def test_the_names_are_the_ones_the_engine_writes() -> None:
    assert names.collective("all_gather", names.RESIDENT) == "yafsdp.all_gather.resident"
    assert names.collective("all_reduce", names.CLIP) == "yafsdp.all_reduce.clip"
    assert names.wait("reduce_scatter", "layers.2") == "yafsdp.wait.reduce_scatter.layers.2"
    assert names.forward("layers.1") == "yafsdp.forward.layers.1"
    assert names.collective("all_gather", "tok_embeddings") == "yafsdp.all_gather.tok_embeddings"


def _step_with_resident_and_clip(path: Path) -> Path:
    """One step of a 2-unit model: the resident gather and unit gathers in forward, unit and
    resident reduce-scatters from autograd's thread, then the clipping all-reduce."""
    t0 = 10_000.0
    ks = [nccl(1, 20, t0 + 100, 50, annotation=names.collective("all_gather", names.RESIDENT))]
    for u in range(2):
        start = t0 + 200 + 500 * u
        ks.append(nccl(1, 20, start, 80, annotation=names.collective("all_gather", f"layers.{u}")))
        ks.append(Kernel(1, 7, start + 100, 300))
    for u in reversed(range(2)):
        bwd = t0 + 2000 + 800 * (1 - u)
        ks.append(Kernel(1, 7, bwd, 500, launch=bwd - 50, tid=AUTOGRAD_TID))
        ks.append(
            nccl(1, 24, bwd + 300, 400, launch=bwd - 40, tid=AUTOGRAD_TID,
                 annotation=names.collective("reduce_scatter", f"layers.{u}"))
        )  # fmt: skip
    resident = names.collective("reduce_scatter", names.RESIDENT)
    ks.append(nccl(1, 24, t0 + 3800, 60, launch=t0 + 3700, tid=AUTOGRAD_TID, annotation=resident))
    clip = names.collective("all_reduce", names.CLIP)
    ks.append(nccl(1, 24, t0 + 3900, 30, launch=t0 + 3850, annotation=clip))
    return write_gpu_trace(path, ks, rank=0, world_size=2)


def test_resident_and_clip_traffic_reach_the_unit_table(tmp_path: Path) -> None:
    events = load_trace(_step_with_resident_and_clip(tmp_path / "rank0.json.gz")).events
    table = unit_table(events, busy_intervals(events)).set_index("annotation")
    rows = {
        "yafsdp.all_gather.resident": ("all_gather", "resident", 50e-6),
        "yafsdp.reduce_scatter.resident": ("reduce_scatter", "resident", 60e-6),
        "yafsdp.all_reduce.clip": ("all_reduce", "clip", 30e-6),
        "yafsdp.reduce_scatter.layers.1": ("reduce_scatter", "layers.1", 400e-6),
    }
    for annotation, (kind, unit, comm_s) in rows.items():
        row = table.loc[annotation]
        assert (row["kind"], row["unit"], row["calls"]) == (kind, unit, 1)
        assert row["comm_s"] == pytest.approx(comm_s)
    # every collective is attributed to the annotation it was issued in
    assert table["comm_s"].sum() == pytest.approx((50 + 2 * 80 + 2 * 400 + 60 + 30) * 1e-6)
    assert isinstance(table, pd.DataFrame) and len(table) == 7
