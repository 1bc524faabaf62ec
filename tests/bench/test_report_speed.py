"""The report over a sweep of two matched jobs whose ranks hold real-sized traces: its first
run (every trace summarised and attributed, in the pool) and its second (records only),
at 8 and at 64 ranks per job. Time and peak memory of each, and how they grow.

The traces are copies of a real GPU trace (`tests/data/gpu_traces/nccl_data.json.gz`, rank
0 of 2, 9.8 MB of JSON) with their rank rewritten, written to tmp. Run with `make bench`.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.report.sweep_fixtures import write_job

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests/data/gpu_traces/nccl_data.json.gz"
RANKS = (8, 64)
FIGURES: dict[int, dict[str, Any]] = {}  # ranks -> the runs' figures, for the growth line


def _sweep(root: Path, ranks: int) -> Path:
    """Two jobs at one point (yafsdp, fsdp1), each rank's trace the real one, rank rewritten."""
    text = gzip.decompress(TRACE.read_bytes()).decode()
    info = re.compile(r'"rank": 0, "world_size": 2')
    sweep = root / f"sweep{ranks}"
    for job, engine in (("0", "yafsdp"), ("1", "fsdp1")):
        write_job(sweep, job, engine=engine, gpus=ranks, step_times=[0.05] * 5)
        traces = sweep / job / "traces"
        traces.mkdir(parents=True, exist_ok=True)
        for rank in range(ranks):
            rewritten = info.sub(f'"rank": {rank}, "world_size": {ranks}', text, count=1)
            (traces / f"rank{rank}.json.gz").write_bytes(
                gzip.compress(rewritten.encode(), compresslevel=1)
            )
    return sweep


def _report(sweep: Path, out: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests/bench/report_speed_child.py"), str(sweep), str(out)],
        check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def _mb(n: float) -> str:
    return f"{n / 1e6:.0f} MB"


@pytest.mark.parametrize("ranks", RANKS)
def test_report_first_and_second_run(benchmark, tmp_path: Path, ranks: int) -> None:
    sweep = _sweep(tmp_path, ranks)
    first = _report(sweep, tmp_path / "out")
    second = benchmark.pedantic(_report, args=(sweep, tmp_path / "out"), rounds=3, iterations=1)
    FIGURES[ranks] = {"first": first, "second": second}
    benchmark.extra_info.update(
        ranks_per_job=ranks,
        first_s=round(first["seconds"], 2),
        first_peak_rss=_mb(first["peak_rss_bytes"]),
        first_tree_peak_rss=_mb(first["tree_peak_rss_bytes"]),
        first_child_processes=first["child_processes"],
        second_s=round(second["seconds"], 2),
        second_peak_rss=_mb(second["peak_rss_bytes"]),
        second_tree_peak_rss=_mb(second["tree_peak_rss_bytes"]),
    )
    assert second["parsed_here"] == 0 and second["child_processes"] == 0
    assert second["seconds"] < first["seconds"]
    if ranks == max(RANKS) and min(RANKS) in FIGURES:
        low, high = FIGURES[min(RANKS)], FIGURES[max(RANKS)]
        for run in ("first", "second"):
            a, b = low[run], high[run]
            ta, tb = a["seconds"], b["seconds"]
            ma, mb = a["tree_peak_rss_bytes"], b["tree_peak_rss_bytes"]
            print(f"\n{run} run, {min(RANKS)} -> {max(RANKS)} ranks per job: time "
                  f"x{tb / ta:.1f} ({ta:.1f} -> {tb:.1f} s), peak RSS, all processes, "
                  f"x{mb / ma:.2f} "
                  f"({_mb(ma)} -> {_mb(mb)})")  # fmt: skip
