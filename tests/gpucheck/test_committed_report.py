"""The committed CPU report (reports/gpu/cpu) was written by the code as it stands: each
skipped GPU row says what the check proves in the words the suites use now, so a row never
names a file or an engine list that moved on."""

from __future__ import annotations

import json
from pathlib import Path

from harness.gpucheck import suite_a, suite_b, suite_d

REPORT = Path(__file__).resolve().parents[2] / "reports" / "gpu" / "cpu" / "gpu-check.json"


def test_the_committed_cpu_report_names_the_rows_as_the_suites_do() -> None:
    rows = json.loads(REPORT.read_text())["rows"]
    committed = {(r["suite"], r["check"]): r["proves"] for r in rows if r["suite"] != "C"}
    current = {
        (suite, name): proves
        for suite, names in (("A", suite_a.NAMES), ("B", suite_b.NAMES), ("D", suite_d.NAMES))
        for name, proves in names
    }
    assert committed == current
