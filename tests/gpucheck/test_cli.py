"""`python -m harness.gpucheck` on a machine without CUDA: skips, says so, exits 0."""

from __future__ import annotations

import json

import pytest
import torch

from harness.gpucheck import cli, suite_c
from harness.gpucheck.check_rows import FAIL, SKIP, Check

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")


def test_gpu_suites_are_skipped_rows_and_exit_zero(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    code = cli.main(["--suite", "A", "--suite", "b", "--reports-dir", str(tmp_path / "r")])
    assert code == 0
    assert "GPU checks skipped" in capsys.readouterr().out
    data = json.loads((tmp_path / "r" / "cpu" / "gpu-check.json").read_text())
    rows = data["rows"]
    assert {r["suite"] for r in rows} == {"A", "B"} and len(rows) == 14
    assert all(r["result"] == SKIP for r in rows)
    assert data["meta"]["cuda_device"] is None
    md = (tmp_path / "out" / "gpu-check.md").read_text()
    assert md.startswith("# gpu-check: CPU only") and "were skipped" in md


def test_require_gpu_is_an_error_without_cuda(tmp_path, capsys):
    assert cli.main(["--require-gpu", "--reports-dir", str(tmp_path)]) == 2
    assert "--require-gpu" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_failed_check_makes_the_exit_code_one(tmp_path, monkeypatch):
    def failing(device, *, reduced, budget_s, on_row):
        assert reduced and device.type == "cpu"
        row = Check(suite="C", check="8 x", proves="p", result=FAIL, detail="params off")
        on_row(row)
        return [row]

    monkeypatch.setattr(suite_c, "run", failing)
    monkeypatch.delenv("OUT", raising=False)
    assert cli.main(["--suite", "C", "--reports-dir", str(tmp_path)]) == 1


def test_unknown_suite_is_refused(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--suite", "E"])
    assert "invalid choice: 'E'" in capsys.readouterr().err


def test_the_give_way_probe_suite_is_a_skipped_row_without_cuda(tmp_path, monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    assert cli.main(["--suite", "D", "--reports-dir", str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "cpu" / "gpu-check.json").read_text())["rows"]
    assert (row["suite"], row["result"]) == ("D", SKIP) and "give-way" in row["check"]
    assert not (tmp_path / "cpu" / "give_way_calibration.json").exists()


def test_a_cpu_run_writes_to_an_ignored_folder_by_default(tmp_path, monkeypatch):
    """A clean clone stays clean: without --reports-dir a CPU run writes under outputs/
    (git ignores it), never into the committed reports/gpu/."""
    assert cli.CPU_REPORTS_DIR == cli.REPO / "outputs" / "gpu-check"
    monkeypatch.delenv("OUT", raising=False)
    monkeypatch.setattr(cli, "CPU_REPORTS_DIR", tmp_path / "outputs" / "gpu-check")
    monkeypatch.setattr(cli, "REPORTS_DIR", tmp_path / "reports" / "gpu")
    assert cli.main(["--suite", "A"]) == 0
    assert (tmp_path / "outputs" / "gpu-check" / "cpu" / "gpu-check.md").is_file()
    assert not (tmp_path / "reports").exists()
