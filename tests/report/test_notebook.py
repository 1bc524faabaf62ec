"""The sweep-results notebook runs top to bottom on a fixture sweep."""

from __future__ import annotations

import os
from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "sweep_results.py"


def outputs_text(cells: list) -> str:
    parts = []
    for cell in cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def test_sweep_notebook_runs_on_a_fixture_sweep(
    sweep: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWEEP_DIR", str(sweep))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel draws inline
    nb = jupytext.read(NOTEBOOK)
    NotebookClient(
        nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(REPO)}}
    ).execute()
    text = outputs_text(nb.cells)
    assert (sweep / "results.csv").exists()  # built from the job directories on the way
    assert f"{sweep / 'results.csv'}: 6 jobs" in text
    # The speedup pivot: fsdp1 1.0 s and fsdp2 1.2 s against yafsdp 0.9 s at seq 128.
    speedup_cell = next(c for c in nb.cells if "speedup = pd.DataFrame(" in c.source)
    speedup = outputs_text([speedup_cell])
    assert "fsdp1" in speedup and "10.0" in speedup and "25.0" in speedup
    images = [
        out
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if "image/png" in out.get("data", {})
    ]
    assert len(images) == 2
