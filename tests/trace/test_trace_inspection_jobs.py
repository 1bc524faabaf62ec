"""The trace-inspection notebook keys jobs by job directory: three runs of one engine are
three rows, not one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.notebooks import run_notebook
from tests.trace.test_trace_why import _job

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # a notebook kernel


def test_three_runs_of_one_engine_are_three_rows(tmp_path, monkeypatch):
    jobs = [_job(tmp_path, f"repeat{r}", "yafsdp", timed_s=0.002) for r in range(3)]
    monkeypatch.setenv("TRACE_JOB_DIR", os.pathsep.join(map(str, jobs)))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("SWEEP_DIR", raising=False)
    nb = run_notebook(ROOT / "notebooks/trace_inspection.py", ROOT)
    overlap = next(c for c in nb.cells if "profiles = {" in c.source)
    text = "".join(str(o.get("data", {}).get("text/plain", "")) for o in overlap["outputs"])
    for r in range(3):
        assert f"repeat{r}" in text
    assert text.count("yafsdp") == 3
