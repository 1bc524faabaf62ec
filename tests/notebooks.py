"""Run a notebook of notebooks/ top to bottom as Jupyter would (jupytext's percent format, a
python3 kernel). jupytext and nbclient are imported here, when a notebook runs: at a test
module's top they cost every pytest worker about 3 s of collection (nbformat's JSON-schema
validator compiles its grammars)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run_notebook(path: Path, cwd: Path) -> Any:
    """The executed notebook (its cells with their outputs); `cwd`: the kernel's directory."""
    import jupytext
    from nbclient import NotebookClient

    nb = jupytext.read(path)
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    ).execute()
    return nb
