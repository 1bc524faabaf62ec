"""`make bench` says each benchmark's result as it finishes (pytest-benchmark's own table
comes only at the end of the run, after minutes of silence)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest


def finished_line(nodeid: str, benchmark: Any, seconds: float) -> str:
    """`[bench] tests/bench/x.py::test_y: median 1.23 s (min 1.2 s, 3 rounds); 40 s`,
    with the figures the benchmark recorded (extra_info) after it."""
    meta = getattr(benchmark, "stats", None)
    stats = getattr(meta, "stats", None)
    if stats is None or not getattr(stats, "data", None):
        return f"[bench] {nodeid}: done in {seconds:.0f} s"
    line = (f"[bench] {nodeid}: median {stats.median:.4g} s (min {stats.min:.4g} s, "
            f"{stats.rounds} rounds); {seconds:.0f} s in all")  # fmt: skip
    extra = getattr(benchmark, "extra_info", None) or {}
    return line + "".join(f"\n    {k}: {v}" for k, v in extra.items())


@pytest.fixture(autouse=True)
def _say_when_finished(request: pytest.FixtureRequest) -> Iterator[None]:
    started = time.perf_counter()
    yield
    benchmark = request.node.funcargs.get("benchmark")
    line = finished_line(request.node.nodeid, benchmark, time.perf_counter() - started)
    print(f"\n{line}", flush=True)  # `make bench` runs with -s: shown as the test ends
