"""The attribution runs where torch cannot be imported (the report reads traces there)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.report.test_no_torch import run_without_torch
from tests.trace.kineto_program import write_program
from tests.trace.test_trace_attribute import _step


def test_attribute_cli_and_modules_run_without_torch(tmp_path: Path) -> None:
    trace = write_program(tmp_path / "rank0.json.gz", [_step(), _step("allocator", 250.0)])
    proc = run_without_torch(tmp_path, "-m", "harness.trace", "attribute", str(trace), "--json")
    assert proc.returncode == 0, proc.stderr
    steps = json.loads(proc.stdout)
    assert [s["step"] for s in steps] == [1, 2]
    proc = run_without_torch(
        tmp_path,
        "-c",
        "import sys, harness.trace.diagnose.attribute, harness.trace.diagnose.attribute_cli, "
        "harness.trace.diagnose.stream_idle, harness.trace.diagnose.causes; "
        "assert not [m for m in sys.modules if m.split('.')[0] == 'torch' and sys.modules[m]]",
    )
    assert proc.returncode == 0, proc.stderr
