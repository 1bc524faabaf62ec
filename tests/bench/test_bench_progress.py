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


BENCH_DIR = __import__("pathlib").Path(__file__).parent


def _pedantic_calls() -> list[tuple[str, __import__("ast").Call]]:
    import ast

    found = []
    for path in sorted(BENCH_DIR.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "pedantic":
                found.append((path.name, node))
    return found


def test_every_benchmark_runs_enough_rounds_for_a_median() -> None:
    """pytest-benchmark's median (and `pytest-benchmark compare`) needs rounds: pedantic
    runs one unless told."""
    import ast
    import importlib

    calls = _pedantic_calls()
    assert len(calls) >= 5
    for name, call in calls:
        given = {k.arg: k.value for k in call.keywords}.get("rounds")
        assert given is not None, f"{name}:{call.lineno}: pedantic without rounds= runs once"
        if ast.unparse(given) == "ROUNDS":  # the shared setting, BENCH_ROUNDS
            value = importlib.import_module("tests.bench.rounds").ROUNDS
        else:
            value = ast.literal_eval(given)
        assert value >= 3, f"{name}:{call.lineno}: rounds={ast.unparse(given)} gives no median"


def test_each_engine_benchmark_records_its_dtype() -> None:
    """bf16 or fp32 is chosen per run (BENCH_DTYPE or this CPU's rates): a saved run that
    does not say which cannot be compared with another."""
    import ast

    tree = ast.parse((BENCH_DIR / "test_engine_speed.py").read_text())
    benchmarks = [
        f
        for f in tree.body
        if isinstance(f, ast.FunctionDef)
        and f.name.startswith("test_")
        and "benchmark" in [a.arg for a in f.args.args]
    ]
    assert len(benchmarks) == 3
    for f in benchmarks:
        keys = {
            node.slice.value
            for node in ast.walk(f)
            if isinstance(node, ast.Subscript)
            and ast.unparse(node.value) == "benchmark.extra_info"
            and isinstance(node.slice, ast.Constant)
        }
        assert "dtype" in keys, f"{f.name} does not record extra_info['dtype']"
