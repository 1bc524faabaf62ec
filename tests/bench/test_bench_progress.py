"""`make bench` prints each benchmark's result as it finishes."""

from __future__ import annotations

from types import SimpleNamespace

from tests.bench.conftest import finished_line


def test_a_finished_benchmark_says_its_median_and_figures() -> None:
    stats = SimpleNamespace(data=[1.0, 1.2, 2.0], median=1.2, min=1.0, rounds=3)
    bench = SimpleNamespace(stats=SimpleNamespace(stats=stats), extra_info={"yafsdp_128": 0.4})
    line = finished_line("tests/bench/x.py::test_y", bench, 41.6)
    assert line.splitlines() == [
        "[bench] tests/bench/x.py::test_y: median 1.2 s (min 1 s, 3 rounds); 42 s in all",
        "    yafsdp_128: 0.4",
    ]
    assert finished_line("t", None, 3.0) == "[bench] t: done in 3 s"


def test_make_bench_shows_output_as_it_comes() -> None:
    from pathlib import Path

    makefile = (Path(__file__).parents[2] / "Makefile").read_text()
    (bench,) = [ln for ln in makefile.splitlines() if "tests/bench" in ln and "pytest" in ln]
    assert " -s" in bench
