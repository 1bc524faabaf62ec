"""Summarizing a 200 MB (uncompressed) trace: wall time and peak memory.

Run with `make bench` (or pytest tests/bench --benchmark-only). The summary runs in a fresh
process so that its peak RSS is its own; it must stay under 3x the file size.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.rounds import ROUNDS
from tests.trace.synthetic import write_large_gpu_trace

ROOT = Path(__file__).resolve().parents[2]
TRACE_BYTES = 200_000_000


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_large_gpu_trace(
        tmp_path_factory.mktemp("big") / "rank0.json", target_bytes=TRACE_BYTES
    )


def _summarize_in_child(path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests/bench/trace_speed_child.py"), str(path)],
        check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    return json.loads(out.stdout)


def test_summarize_200mb_trace(benchmark, big_trace):
    size = big_trace.stat().st_size
    stats = benchmark.pedantic(_summarize_in_child, args=(big_trace,), rounds=ROUNDS, iterations=1)
    benchmark.extra_info.update(file_bytes=size, **stats)
    print(
        f"\n{size / 1e6:.0f} MB trace: summarize {stats['seconds']:.1f} s wall "
        f"({stats['cpu_seconds']:.1f} s CPU), peak RSS "
        f"{stats['peak_rss_bytes'] / 1e6:.0f} MB (interpreter and libraries "
        f"{stats['baseline_rss_bytes'] / 1e6:.0f} MB), {stats['steps']} steps"
    )
    assert size >= TRACE_BYTES
    assert stats["overlap_pct"] == pytest.approx(90.0)  # the generator's pattern: 9 of 10 us
    assert stats["peak_rss_bytes"] <= 3 * size
