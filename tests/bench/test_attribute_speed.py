"""Attributing a 100 MB (uncompressed) trace against summarizing it: at most twice as long.

Run with `make bench` (or pytest tests/bench --benchmark-only). Each runs in a fresh process,
parsing included; the floor is on CPU time, steadier than wall time on a shared machine.
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
TRACE_BYTES = 100_000_000
MAX_RATIO = 2.0


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_large_gpu_trace(
        tmp_path_factory.mktemp("big") / "rank0.json", target_bytes=TRACE_BYTES, nelems=1 << 20
    )


def _in_child(mode: str, path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests/bench/attribute_speed_child.py"), mode, str(path)],
        check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    return json.loads(out.stdout)


def test_attribute_100mb_trace_against_summarize(benchmark, big_trace):
    size = big_trace.stat().st_size
    attributed = benchmark.pedantic(_in_child, args=("attribute", big_trace), rounds=ROUNDS)
    summarized = _in_child("summarize", big_trace)
    ratio = attributed["cpu_seconds"] / summarized["cpu_seconds"]
    benchmark.extra_info.update(
        file_bytes=size, attribute=attributed, summarize=summarized, cpu_ratio=ratio
    )
    print(
        f"\n{size / 1e6:.0f} MB trace, {attributed['steps']} steps: attribute "
        f"{attributed['seconds']:.1f} s wall ({attributed['cpu_seconds']:.1f} s CPU), "
        f"summarize {summarized['seconds']:.1f} s wall ({summarized['cpu_seconds']:.1f} s CPU); "
        f"attribute / summarize = {ratio:.2f} (CPU)"
    )
    assert size >= TRACE_BYTES
    assert attributed["steps"] == summarized["steps"]
    assert ratio <= MAX_RATIO
