"""`make gpu-check`'s run: suites in the order asked, each announced with its estimated GPU
minutes, the report rewritten after every row (a run cut short still leaves one), and a
deadline for the whole run that suite C absorbs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from harness.gpucheck import cli, suite_a, suite_b, suite_c, suite_d
from harness.gpucheck.check_rows import PASS, SKIP, Check
from harness.gpucheck.schedule import ORDER, UNIT_SECONDS, Work

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU run")


def _rows_on_disk(reports: Path) -> list[str]:
    data = json.loads((reports / "cpu" / "gpu-check.json").read_text())
    return [f"{r['suite']}{r['check']}" for r in data["rows"]]


@pytest.fixture
def fake_c(monkeypatch, tmp_path):
    """Suite C as three rows; after each, what the report on disk holds."""
    on_disk: list[list[str]] = []
    budgets: list[float] = []

    def run(device, *, reduced, budget_s, on_row):
        budgets.append(budget_s)
        rows = []
        for i in range(3):
            rows.append(Check(suite="C", check=f"8 p{i}", proves="p", result=PASS))
            on_row(rows[-1])
            on_disk.append(_rows_on_disk(tmp_path))
        return rows

    monkeypatch.setattr(suite_c, "run", run)
    monkeypatch.delenv("OUT", raising=False)
    return on_disk, budgets


def test_the_report_is_on_disk_after_every_row(fake_c, tmp_path):
    on_disk, _ = fake_c
    assert cli.main(["--suite", "C", "--reports-dir", str(tmp_path)]) == 0
    assert on_disk == [["C8 p0"], ["C8 p0", "C8 p1"], ["C8 p0", "C8 p1", "C8 p2"]]


def test_suites_run_in_the_order_asked_each_announced_first(fake_c, tmp_path, capsys):
    assert cli.main(["--suite", "D", "--suite", "C", "--suite", "A", "--reports-dir",
                     str(tmp_path)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    announced = re.findall(r"\[gpu-check\] suite ([A-D]): ", out)
    assert announced == ["D", "C", "A"]
    assert cli.parse_args([]).suite is None and list(ORDER) == ["A", "B", "D", "S", "C"]


def test_each_gpu_suite_prints_its_estimate_from_its_work(fake_c, tmp_path, capsys):
    cli.main(["--reports-dir", str(tmp_path)])
    out = capsys.readouterr().out
    for suite, units in (("A", suite_a.WORK), ("B", suite_b.work()), ("D", suite_d.WORK)):
        minutes = f"~{Work(units).seconds / 60:.1f} GPU min"
        assert f"suite {suite}: {minutes}" in out, out
    assert Work({"job": 2}).seconds == 2 * UNIT_SECONDS["job"]


def test_suite_c_absorbs_what_the_deadline_leaves(fake_c, tmp_path):
    _, budgets = fake_c
    cli.main(["--deadline-s", "100", "--reports-dir", str(tmp_path)])
    assert len(budgets) == 1 and 90 < budgets[0] <= 100
    cli.main(["--suite", "C", "--deadline-s", "100", "--budget-s", "30", "--reports-dir",
              str(tmp_path)])  # fmt: skip
    assert budgets[-1] == 30


def test_a_suite_past_the_deadline_is_skipped_rows_saying_so(fake_c, tmp_path, capsys):
    assert cli.main(["--suite", "A", "--suite", "B", "--deadline-s", "0", "--reports-dir",
                     str(tmp_path)]) == 0  # fmt: skip
    data = json.loads((tmp_path / "cpu" / "gpu-check.json").read_text())
    assert {r["suite"] for r in data["rows"]} == {"A", "B"}
    assert all(r["result"] == SKIP and "deadline" in r["detail"] for r in data["rows"])
    assert "skipped 14 (the run's deadline (0 s) passed" in capsys.readouterr().out


def test_the_closing_lines_say_what_was_skipped_and_why(fake_c, tmp_path, capsys):
    cli.main(["--suite", "A", "--suite", "C", "--reports-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "skipped 7 (no CUDA device: GPU check skipped): A1 parity, A2 ordering" in out
