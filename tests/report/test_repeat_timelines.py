"""A sweep with repeats draws one timeline panel per engine (its first run), not one per run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.results import timelines


def test_each_engine_is_drawn_once_from_its_first_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[list[str]] = []

    def plot(job_dirs: list[Path], out: Path) -> Path:
        drawn.append([p.name for p in job_dirs])
        return out

    monkeypatch.setattr("harness.trace.timeline.plot_timeline", plot)
    point = dict(model="llama_tiny", gpus=2, seq_len=128, ckpt_layers=0, micro_batch=1,
                 grad_accum=1, dtype="fp32", seed=0, model_impl="native")  # fmt: skip
    rows = [
        {**point, "engine": e, "repeat": r, "status": "ok", "job_dir": f"{e}{r}",
         "profile_traces": ["traces/rank0.json.gz"]}
        for r in (1, 0) for e in ("yafsdp", "fsdp1")
    ]  # fmt: skip
    timelines.draw_sweep_timelines(tmp_path, pd.DataFrame(rows))
    assert drawn == [["yafsdp0", "fsdp10"]]  # each engine's first run, yafsdp first
