"""Grid points are named by `GridPoint.file_stem` wherever a file or a check names one."""

from __future__ import annotations

from pathlib import Path

import yaml

from harness.gpucheck.suite_c import reduced_points
from harness.jobdir.grid_point import GridPoint

POINTS = Path(__file__).resolve().parents[2] / "sweeps" / "point"


def test_each_published_point_file_is_named_by_its_grid_point() -> None:
    files = sorted(POINTS.glob("*.yaml"))
    assert len(files) == 16
    for path in files:
        assert path.stem == GridPoint.of(yaml.safe_load(path.read_text())).file_stem(), path


def test_suite_cs_reduced_points_are_named_by_their_grid_point() -> None:
    points, _ = reduced_points()
    for p in points:
        fields = {"model": p.model, "gpus": p.gpus, "seq_len": p.seq_len,
                  "ckpt_layers": p.ckpt_layers}  # fmt: skip
        assert p.name == GridPoint.of(fields).file_stem() == f"llama_small_g{p.gpus}_s4_c1"
