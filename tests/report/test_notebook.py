"""The sweep-results notebook runs top to bottom on a fixture sweep."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.notebooks import run_notebook

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "sweep_results.py"


def outputs_text(cells: list) -> str:
    parts = []
    for cell in cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def _execute(sweep: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SWEEP_DIR", str(sweep))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel draws inline
    return run_notebook(NOTEBOOK, REPO)


def test_a_sweep_with_no_ok_job_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.report.sweep_fixtures import write_job

    sweep = tmp_path / "failed"
    write_job(sweep, "0", engine="yafsdp", status="failed", error="boom")
    write_job(sweep, "1", engine="fsdp1", status="oom", error="OutOfMemory: cap")
    text = outputs_text(_execute(sweep, monkeypatch).cells)
    assert "no job of this sweep finished ok (1 failed, 1 oom)" in text


def test_sweep_notebook_runs_on_a_fixture_sweep(
    sweep: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nb = _execute(sweep, monkeypatch)
    text = outputs_text(nb.cells)
    assert (sweep / "results.csv").exists()  # built from the job directories on the way
    assert f"{sweep / 'results.csv'}: 6 jobs" in text
    # The speedup pivot: fsdp1 1.0 s and fsdp2 1.2 s against yafsdp 0.9 s at seq 128.
    # as the report labels them: one table per baseline, the speedup cell with its run count
    speedup_cell = next(c for c in nb.cells if "speedup_table(rows)" in c.source)
    speedup = outputs_text([speedup_cell])
    assert "YaFSDP vs fsdp1, " in speedup and "YaFSDP vs fsdp2, " in speedup
    assert "10.00%" in speedup and "25.00%" in speedup and "1 repeat" in speedup
    images = [
        out
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if "image/png" in out.get("data", {})
    ]
    assert len(images) == 2
