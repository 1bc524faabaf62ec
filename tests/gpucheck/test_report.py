"""The gpu-check report: device slug, rows, merging suites, $OUT, exit codes."""

from __future__ import annotations

import json

import pytest

from harness.gpucheck.check_rows import (
    ERROR,
    FAIL,
    PASS,
    SKIP,
    Check,
    Verdict,
    exit_code,
    run_check,
)
from harness.gpucheck.report import (
    JSON,
    MARKDOWN,
    device_slug,
    merge_rows,
    read_rows,
    render_markdown,
    write_report,
)


def _row(suite: str, check: str, result: str = PASS, **figures) -> Check:
    return Check(suite=suite, check=check, proves="something", result=result, figures=figures)


@pytest.mark.parametrize(
    "name, slug",
    [
        ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
        ("NVIDIA H200", "nvidia-h200"),
        ("  Weird/Name (rev 2) ", "weird-name-rev-2"),
        (None, "cpu"),
        ("", "cpu"),
    ],
)
def test_device_slug(name, slug):
    assert device_slug(name) == slug


def test_exit_code_fails_on_fail_or_error_but_not_skip():
    assert exit_code([_row("A", "1"), _row("C", "8", SKIP)]) == 0
    assert exit_code([_row("A", "1"), _row("A", "2", FAIL)]) == 1
    assert exit_code([_row("A", "1", ERROR)]) == 1
    assert exit_code([]) == 0


def test_unknown_result_is_refused():
    with pytest.raises(ValueError, match="result='maybe'"):
        Check(suite="A", check="1", proves="x", result="maybe")


def test_run_check_turns_exceptions_into_error_rows():
    def broken() -> Verdict:
        raise KeyError("no_such_stat")

    row = run_check("A", "4 memory", "p", broken)
    assert row.result == ERROR and "KeyError" in row.detail and "no_such_stat" in row.detail
    assert run_check("A", "1", "p", lambda: Verdict(False, {"x": 1}, "why")).result == FAIL
    big = run_check("C", "8", "p", lambda: Verdict(False, {"fits": False}, "OOM", skipped=True))
    assert (big.result, big.figures, big.detail) == (SKIP, {"fits": False}, "OOM")
    ok = run_check("A", "1", "p", lambda: Verdict(True, {"x": 1.5}))
    assert (ok.result, ok.figures) == (PASS, {"x": 1.5})


def test_merge_replaces_only_the_suites_run_now():
    old = [_row("A", "1", FAIL), _row("B", "7"), _row("C", "8 old")]
    new = [_row("C", "8 new")]
    merged = merge_rows(old, new)
    assert [(r.suite, r.check) for r in merged] == [("A", "1"), ("B", "7"), ("C", "8 new")]


def test_cpu_report_says_gpu_checks_were_skipped():
    text = render_markdown({"cuda_device": None, "torch": "2.13"}, [_row("C", "8 x", x=1.23456)])
    assert "CPU only" in text and "GPU checks" in text and "skipped" in text
    assert "| check | what it proves | result | figures |" in text
    assert "x=1.235" in text
    gpu = render_markdown({"cuda_device": "NVIDIA H100 80GB HBM3"}, [_row("A", "1", FAIL)])
    assert "CPU run" not in gpu and "**fail**" in gpu


def test_write_report_merges_and_copies_to_out(tmp_path, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("OUT", str(out))
    meta = {"cuda_device": "NVIDIA H200", "suites": {"A": {"when": "t1"}}}
    write_report(meta, [_row("A", "1", FAIL)], tmp_path / "reports")
    meta2 = {"cuda_device": "NVIDIA H200", "suites": {"C": {"when": "t2"}}}
    paths = write_report(meta2, [_row("C", "8 p", PASS, gib=1.0)], tmp_path / "reports")

    folder = tmp_path / "reports" / "nvidia-h200"
    assert folder / MARKDOWN in paths and out / MARKDOWN in paths
    rows = read_rows(folder / JSON)
    assert [(r.suite, r.result) for r in rows] == [("A", FAIL), ("C", PASS)]
    data = json.loads((out / JSON).read_text())
    assert set(data["meta"]["suites"]) == {"A", "C"}
    assert (out / MARKDOWN).read_text() == (folder / MARKDOWN).read_text()


def test_without_out_only_the_tree_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    paths = write_report({"cuda_device": None}, [_row("C", "8")], tmp_path)
    assert sorted(p.name for p in paths) == [JSON, MARKDOWN]
    assert all(p.parent == tmp_path / "cpu" for p in paths)


def test_report_and_arithmetic_import_no_torch(tmp_path):
    from tests.report.test_no_torch import run_without_torch

    code = (
        "import harness.gpucheck.report, harness.gpucheck.check_rows, "
        "harness.gpucheck.judging, harness.gpucheck.footprint"
    )
    proc = run_without_torch(tmp_path, "-c", code)
    assert proc.returncode == 0, proc.stderr
