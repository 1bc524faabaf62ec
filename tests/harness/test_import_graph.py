"""The harness's modules import one another without circles where it matters: an engine's
base and the registry, a model's shapes and the Hugging Face builder, and the session that
sits above them. Every import counts, those inside functions and under TYPE_CHECKING too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ACYCLIC = (
    "harness.engines.base",
    "harness.engines.registry",
    "harness.models.hf",
    "harness.models.shapes",
    "harness.rank.session",
)


def _modules() -> dict[str, Path]:
    out = {}
    for path in (ROOT / "harness").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the harness modules it imports anywhere in its source."""
    modules = _modules()

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {known(alias.name) for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets |= {known(f"{node.module}.{a.name}") for a in node.names}
        graph[name] = {t for t in targets if t and t != name}
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_graph_sees_imports_inside_functions() -> None:
    graph = import_graph()
    assert "harness.models.hf" in graph["harness.models.shapes"]  # inside shape_of
    assert "harness.plan.planner" in graph["harness.rank.session"]


def test_no_module_of_these_reaches_itself() -> None:
    graph = import_graph()
    circles = [name for name in ACYCLIC if name in reachable(graph, name)]
    assert circles == []


def test_no_harness_module_reaches_itself() -> None:
    graph = import_graph()
    assert sorted(name for name in graph if name in reachable(graph, name)) == []
