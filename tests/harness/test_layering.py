"""The folders of `harness/` are lifetimes, and imports may only point the way data flows:
one rank's process never reaches the job, sweep or results code above it; what crosses a
process boundary (`jobdir`) runs without torch; the trace library never reads a sweep's results;
the results and the report never reach the job runner. Every import counts, transitively,
those inside functions too (the graph is `test_import_graph`'s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.test_import_graph import _modules, import_graph, reachable
from tests.report.test_no_torch import run_without_torch

FORBIDDEN = [
    ("harness.rank", ("harness.job", "harness.sweep", "harness.results")),
    ("harness.trace", ("harness.results",)),
    ("harness.results", ("harness.job",)),
    ("harness.report", ("harness.job",)),
]


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(graph: dict[str, set[str]], package: str, banned: tuple[str, ...]) -> list[str]:
    """`module -> banned module` for each module of `package` that reaches a banned one."""
    found = []
    for name in sorted(m for m in graph if _in(m, package)):
        for target in sorted(reachable(graph, name)):
            if any(_in(target, b) for b in banned):
                found.append(f"{name} -> {target}")
    return found


@pytest.mark.parametrize(("package", "banned"), FORBIDDEN, ids=[p for p, _ in FORBIDDEN])
def test_imports_point_the_way_data_flows(package: str, banned: tuple[str, ...]) -> None:
    graph = import_graph()
    assert any(_in(m, package) for m in graph), f"{package} has no modules"
    assert violations(graph, package, banned) == []


def test_jobdir_runs_without_torch(tmp_path: Path) -> None:
    """Every jobdir module imports, and a recorded config is read (a bare engine label
    resolved through the registry), in a process where `import torch` fails."""
    modules = sorted(m for m in _modules() if _in(m, "harness.jobdir"))
    assert modules, "harness.jobdir has no modules"
    script = "\n".join(
        [
            "import importlib",
            f"for name in {modules!r}: importlib.import_module(name)",
            "from harness.jobdir.recorded_config import recorded_config",
            "from harness.jobdir.result import Result",
            "flat = recorded_config(Result(status='ok', config={'engine': 'fsdp1'}))",
            "assert flat['engine.name'] == 'fsdp1', flat",
        ]
    )
    proc = run_without_torch(tmp_path, "-c", script)
    assert proc.returncode == 0, proc.stderr


def test_the_guard_sees_a_forbidden_edge() -> None:
    graph = {"harness.rank.run": {"harness.plan.x"}, "harness.plan.x": {"harness.job.run"}}
    assert violations(graph, "harness.rank", ("harness.job",)) == [
        "harness.rank.run -> harness.job.run"
    ]


MAX_MODULES_PER_FOLDER = 15


def test_no_folder_holds_more_than_15_modules() -> None:
    """A folder that outgrows 15 modules at its own level gets rooms (sub-folders)."""
    root = Path(__file__).resolve().parents[2] / "harness"
    crowded = {
        str(folder.relative_to(root.parent)): n
        for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]
        if (n := len(list(folder.glob("*.py")))) > MAX_MODULES_PER_FOLDER
    }
    assert crowded == {}
