"""A real `python -m harness` CPU job per engine: its result.json lists every rank's trace,
and the offline summary of those traces (as harness.results.table computes it) has the overlap."""

import json
from pathlib import Path

import pytest

from harness.trace.__main__ import main
from harness.trace.cache import job_profile

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ("fsdp2", "fsdp2_tuned")


@pytest.fixture(scope="module")
def real_jobs(profiled_jobs: dict[str, Path]) -> dict[str, Path]:
    return {engine: profiled_jobs[engine] for engine in ENGINES}


@pytest.mark.slow
def test_each_engine_reports_overlap(real_jobs, capsys):
    overlap = {}
    for engine, job_dir in real_jobs.items():
        listed = json.loads((job_dir / "result.json").read_text())["profile"]
        traces = ["traces/rank0.json.gz", "traces/rank1.json.gz"]
        assert listed == {"traces": traces, "cuda_sync_events": False}  # none on CPU
        profile = job_profile(job_dir)
        assert profile["traces"] == listed["traces"]
        assert len(profile["steps"]) == 4  # 2 ranks x 2 profiled steps
        s = profile["summary"]
        assert s["comm_s_per_step"] > 0 and s["compute_s_per_step"] > 0
        overlap[engine] = s["overlap_pct"]
    with capsys.disabled():
        print("\noverlap % by engine:", {k: round(v, 1) for k, v in overlap.items()})
    # on CPU FSDP2's default collectives block the main thread: nothing overlaps
    assert overlap["fsdp2"] < 5.0


@pytest.mark.slow
def test_timeline_of_real_jobs(real_jobs, tmp_path):
    out = tmp_path / "timeline.png"
    assert main(["timeline", *map(str, real_jobs.values()), "-o", str(out)]) == 0
    assert out.stat().st_size > 10_000
