"""The engine is a library of its own: `yafsdp_impl` imports only torch, the standard
library and itself, its tests import nothing from the harness (they run on models of their
own), and its public names are the package's, held in private modules. Every import counts,
those inside functions and under TYPE_CHECKING too."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import yafsdp_impl

ROOT = Path(__file__).resolve().parents[2]


def imports_of(path: Path, root: Path = ROOT) -> set[str]:
    """The absolute names of the modules `path` imports anywhere in its source."""
    package = ".".join(path.relative_to(root).parent.parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            found.add(".".join(p for p in (base, node.module) if p))
    return found


def imports(folder: Path, root: Path = ROOT) -> list[tuple[str, str]]:
    """(file, module) for every import of every Python file under `folder`."""
    return sorted(
        (str(path.relative_to(root)), module)
        for path in folder.rglob("*.py")
        for module in imports_of(path, root)
    )


def of_harness(found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(f, m) for f, m in found if m.split(".")[0] == "harness"]


def test_the_engine_imports_only_torch_the_standard_library_and_itself() -> None:
    allowed = {*sys.stdlib_module_names, "torch", "yafsdp_impl"}
    found = imports(ROOT / "yafsdp_impl")
    assert [(f, m) for f, m in found if m.split(".")[0] not in allowed] == []


def test_the_engine_and_its_tests_import_nothing_from_the_harness() -> None:
    assert of_harness(imports(ROOT / "yafsdp_impl")) == []
    engine_tests = imports(ROOT / "tests" / "yafsdp_impl")
    assert engine_tests, "the engine's tests were not found"
    assert of_harness(engine_tests) == []
    # nor through the test helpers they share with the harness's tests
    helpers = {
        m
        for _, m in engine_tests
        if m.startswith("tests.") and not m.startswith("tests.yafsdp_impl")
    }
    for helper in sorted(helpers):
        path = ROOT / (helper.replace(".", "/") + ".py")
        assert of_harness([(helper, m) for m in imports_of(path)]) == [], helper


def test_the_guard_sees_every_kind_of_import(tmp_path: Path) -> None:
    folder = tmp_path / "tests" / "engine"
    folder.mkdir(parents=True)
    (folder / "probe.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import harness.ports as ports\n"
        "if TYPE_CHECKING:\n    from harness.models import llama\n"
        "def f():\n    from harness import placement\n"
        "from .. import models\n"
    )
    found = imports(folder, tmp_path)
    assert [m for _, m in found] == [
        "harness", "harness.models", "harness.ports", "tests", "typing",
    ]  # fmt: skip
    harness = ["harness", "harness.models", "harness.ports"]
    assert of_harness(found) == [("tests/engine/probe.py", m) for m in harness]


def test_the_public_names_resolve_from_private_modules() -> None:
    """Each name of `__all__` is importable from the package and defined in one of its
    private modules; the package lists no other names."""
    for name in yafsdp_impl.__all__:
        value = getattr(yafsdp_impl, name)
        home = value.__module__
        assert home.startswith("yafsdp_impl._"), f"{name} is defined in {home}"
    assert set(yafsdp_impl.__all__) <= set(dir(yafsdp_impl))
    public_modules = {p.stem for p in (ROOT / "yafsdp_impl").glob("*.py")} - {"__init__"}
    assert {m for m in public_modules if not m.startswith("_")} == {"annotation_names"}
