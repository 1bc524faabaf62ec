"""The report captions a sweep's timeline pictures by the grid point each shows: from the
sweep's timeline index, or, for a sweep drawn before the index, from its jobs' points."""

from __future__ import annotations

from pathlib import Path

from sweep_fixtures import write_job

from harness.jobdir.grid_point import GridPoint
from harness.report import build_report
from harness.results.timelines import TIMELINE_DIR, write_timeline_index

EVERY_ENGINE = "every engine, one profiled step on the same time scale"


def test_an_older_sweep_has_its_pictures_captioned_by_its_jobs_points(
    sweep: Path, tmp_path: Path
) -> None:
    png = (sweep / "0/traces/timeline.png").read_bytes()
    (sweep / TIMELINE_DIR).mkdir()
    (sweep / TIMELINE_DIR / "llama_tiny_g2_s256_c0.png").write_bytes(png)  # no index
    (sweep / TIMELINE_DIR / "llama_tiny_g2_s512_c0.png").write_bytes(png)  # no such job
    text = build_report([sweep], tmp_path / "out").read_text()
    assert f"**llama_tiny, 2 GPUs, seq-len 256, 0 checkpointed layers: {EVERY_ENGINE}**" in text
    assert "**sweep timeline `llama_tiny_g2_s512_c0.png`**" in text


def test_points_that_differ_by_setting_are_told_apart(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_job(sweep, "0", engine="yafsdp", png=True)
    write_job(sweep, "1", engine="yafsdp", dtype="fp32")
    png = (sweep / "0/traces/timeline.png").read_bytes()
    pictures = {}
    for dtype in ("bf16", "fp32"):
        point = GridPoint.of(
            dict(model="llama_tiny", gpus=2, seq_len=128, ckpt_layers=0, micro_batch=1,
                 grad_accum=1, dtype=dtype, seed=0)
        )  # fmt: skip
        (sweep / TIMELINE_DIR).mkdir(exist_ok=True)
        (sweep / TIMELINE_DIR / f"{dtype}.png").write_bytes(png)
        pictures[point] = f"{dtype}.png"
    write_timeline_index(sweep, pictures)
    text = build_report([sweep], tmp_path / "out").read_text()
    for dtype in ("bf16", "fp32"):
        setting = f"micro_batch=1, grad_accum=1, dtype={dtype}, seed=0, model_impl=native"
        caption = f"llama_tiny, 2 GPUs, seq-len 128, 0 checkpointed layers ({setting})"
        assert f"**{caption}: {EVERY_ENGINE}**" in text
