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


# Top-level packages from the lowest to the highest, the way data flows: definitions, the
# records a job directory holds, the checks, one rank's process, the planner, the job, the
# trace library and its readers, the sweep and its launchers, the report, and the faces.
LAYERS = [
    ("harness.models",),
    ("harness.config",),
    ("harness.dtypes", "harness.markdown", "harness.ports", "harness.node_split"),
    ("harness.placement",),
    ("harness.engines",),
    ("harness.jobdir",),
    ("harness.validate",),
    ("harness.bandwidth",),
    ("harness.rank",),
    ("harness.plan",),
    ("harness.job",),
    ("harness.trace",),
    ("harness.results",),
    ("harness.sweep",),
    ("harness.slurm",),
    ("harness.report",),
    # the faces: command lines over everything below (a package's own `__main__` too)
    ("harness.gpucheck", "harness.cli_overrides", "harness.cli", "harness.__main__",
     "harness.results.__main__"),
]  # fmt: skip
# The one upward arrow: a rank gives yafsdp the planner's memory budget for its buffer plan
# (the engine and the prediction choose the same plan). Nothing else of a rank plans.
ALLOWED_UPWARD = {"harness.rank -> harness.plan": {"harness.rank.session -> harness.plan.planner"}}


def _layer(module: str) -> int:
    """The layer of the longest entry of LAYERS that holds `module`."""
    found = [(len(p), i) for i, packages in enumerate(LAYERS) for p in packages if _in(module, p)]
    if not found:
        raise AssertionError(f"{module} is in no layer of LAYERS: place its package there")
    return max(found)[1]


def upward_arrows(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """`package -> package` for each pair whose import points up LAYERS, with the module
    edges that make it; an arrow is counted once however many imports make it."""
    arrows: dict[str, set[str]] = {}
    for name, targets in graph.items():
        if name == "harness":
            continue
        for target in targets:
            if target == "harness":
                continue
            low, high = _layer(name), _layer(target)
            if high > low:
                pair = f"{_package(name)} -> {_package(target)}"
                arrows.setdefault(pair, set()).add(f"{name} -> {target}")
    return arrows


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_the_import_graph_has_at_most_one_upward_arrow() -> None:
    arrows = upward_arrows(import_graph())
    assert len(arrows) <= 1
    assert arrows == ALLOWED_UPWARD


def test_the_arrow_count_sees_an_upward_import() -> None:
    graph = {"harness.jobdir.result": {"harness.report.render"}, "harness.report.render": set()}
    assert upward_arrows(graph) == {
        "harness.jobdir -> harness.report": {"harness.jobdir.result -> harness.report.render"}
    }


def test_the_memory_model_does_not_import_the_time_model() -> None:
    assert violations(import_graph(), "harness.plan.memory", ("harness.plan.time",)) == []


# The trace package's faces: the command line, and the reader of job directories for the
# diagnosis. The rest of harness.trace outside diagnose/ is the library.
TRACE_FACES = ("harness.trace.__main__", "harness.trace.jobs")


def test_the_trace_library_does_not_import_the_diagnosis() -> None:
    graph = import_graph()
    library = [
        m
        for m in graph
        if _in(m, "harness.trace") and not _in(m, "harness.trace.diagnose") and m not in TRACE_FACES
    ]
    assert library, "harness.trace has no library modules"
    found = [
        f"{m} -> {t}"
        for m in sorted(library)
        for t in sorted(reachable(graph, m))
        if _in(t, "harness.trace.diagnose")
    ]
    assert found == []


# What reading a job directory takes; the diagnosis takes records instead (parsed traces, a
# result, a traced record). Its command-line faces (`*_cli`) take the paths a user names.
JOB_DIR_READERS = {
    "JobDir",
    "read_result",
    "find_traces",
    "load_trace",
    "analyse_job",
    "RESULT_FILE",
}


def test_the_diagnosis_reads_no_job_directory() -> None:
    import ast

    readers = []
    for name, path in _modules().items():
        if not _in(name, "harness.trace.diagnose") or name.endswith("_cli"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            used = {a.name for a in node.names} if isinstance(node, ast.ImportFrom) else set()
            if isinstance(node, ast.Name):
                used = {node.id}
            readers += [f"{name}: {u}" for u in sorted(used & JOB_DIR_READERS)]
            if isinstance(node, ast.ImportFrom) and node.module == "harness.trace.jobs":
                readers.append(f"{name}: harness.trace.jobs")
    assert readers == []
