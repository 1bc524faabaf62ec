"""A sweep's timeline pictures are indexed by grid point: one picture per point, named from
the point (the setting added where two points share the rest), with an index that says
which point each shows, so no reader parses a file name back."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

from harness.jobdir.grid_point import GridPoint
from harness.results.table import collect_results
from harness.results.timelines import (
    TIMELINE_DIR,
    draw_sweep_timelines,
    sweep_timelines,
    timeline_names,
    write_timeline_index,
)

POINT = dict(model="llama_tiny", gpus=2, seq_len=128, ckpt_layers=1)
SETTING = dict(micro_batch=1, grad_accum=1, dtype="bf16", seed=0, model_impl="native")


def test_a_point_is_named_by_its_coordinates_and_the_setting_only_where_needed() -> None:
    bf16 = GridPoint.of(POINT | SETTING)
    fp32 = GridPoint.of(POINT | SETTING | {"dtype": "fp32"})
    other = replace(bf16, seq_len=256)
    assert timeline_names([bf16, other]) == {
        bf16: "llama_tiny_g2_s128_c1.png",
        other: "llama_tiny_g2_s256_c1.png",
    }
    names = timeline_names([bf16, fp32, other])
    assert names[fp32] == (
        "llama_tiny_g2_s128_c1_micro_batch_1_grad_accum_1_dtype_fp32_seed_0_model_impl_native.png"
    )
    assert len(set(names.values())) == 3
    hf = GridPoint.of(POINT | {"model": "hf:sweeps/hf_models/mistral_tiny"})
    assert timeline_names([hf])[hf] == "hf_sweeps_hf_models_mistral_tiny_g2_s128_c1.png"


def test_the_index_says_which_point_each_picture_shows(tmp_path: Path) -> None:
    point = GridPoint.of(POINT | SETTING | {"dtype": "fp32"})
    write_timeline_index(tmp_path, {point: "any_name.png"})
    assert sweep_timelines(tmp_path) == {"any_name.png": point}
    # A sweep drawn before the index existed: its pictures are found by its jobs' points.
    (tmp_path / TIMELINE_DIR / "index.json").unlink()
    assert sweep_timelines(tmp_path, [point]) == {"llama_tiny_g2_s128_c1.png": point}


def _job(sweep: Path, name: str, source: Path, **config: object) -> None:
    shutil.copytree(source, sweep / name)
    path = sweep / name / "result.json"
    data = json.loads(path.read_text())
    data["config"] |= POINT | SETTING | config
    path.write_text(json.dumps(data))


def test_a_sweep_draws_one_indexed_picture_per_grid_point(
    cpu_jobs: dict[str, Path], tmp_path: Path
) -> None:
    sweep = tmp_path / "sweep"
    for dtype in ("bf16", "fp32"):
        for engine, job in cpu_jobs.items():
            _job(sweep, f"{engine}_{dtype}", job, dtype=dtype)
    written = draw_sweep_timelines(sweep, collect_results(sweep))
    shown = sweep_timelines(sweep)
    assert sorted(p.name for p in written) == sorted(shown)
    assert sorted(p.setting.dtype for p in shown.values()) == ["bf16", "fp32"]
    for name, point in shown.items():
        assert (sweep / TIMELINE_DIR / name).read_bytes()[:4] == b"\x89PNG"
        assert point == GridPoint.of(POINT | SETTING | {"dtype": point.setting.dtype})
