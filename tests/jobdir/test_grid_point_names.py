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


def test_a_points_words_are_spelled_once() -> None:
    """The console's job line and the planner's lines spell a point as `GridPoint.words`."""
    from harness.plan.cli import format_why
    from harness.sweep.console import job_label

    config = {"model": "llama_mini", "gpus": 2, "seq_len": 256, "ckpt_layers": 1}
    words = GridPoint.of(config).words()
    assert words == "llama_mini gpus=2 seq=256 ckpt=1"
    assert job_label({**config, "engine": {"label": "fsdp1"}}) == f"{words} fsdp1"
    why = format_why([{**config, "why": {"fsdp1": ["fsdp1 is slower", "because"]}}])
    assert why.splitlines() == [f"{words}: fsdp1 is slower", "  because"]
