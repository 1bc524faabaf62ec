"""The report reads records only: a job's result.json, its prediction.json and its traced
record (trace summaries and attribution, cached beside the traces). A second report over an
unchanged sweep parses no trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.jobdir.prediction import Prediction, read_prediction, write_prediction
from harness.report.render import build_report
from tests.report.test_report_measured_why import _traced_job

BREAKDOWN = {"compute": 0.004, "exposed all_gather": 0.0002}


def _sweep(root: Path) -> Path:
    sweep = root / "sweep"
    _traced_job(sweep, "0", "yafsdp", 0.0, {"iteration_time_s": 0.0052, "breakdown": BREAKDOWN})
    _traced_job(sweep, "1", "fsdp1", 500.0, {"iteration_time_s": 0.0056, "breakdown": BREAKDOWN})
    return sweep


def test_a_second_report_parses_no_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sweep = _sweep(tmp_path)
    first = build_report([sweep], tmp_path / "out").read_text()
    assert "Why (measured, from the traces" in first and "rank 1 arrived late" in first

    def no_parse(path: Path) -> None:
        raise AssertionError(f"the second report parsed the trace {path}")

    monkeypatch.setattr("harness.trace.parse._read", no_parse)
    second = build_report([sweep], tmp_path / "out").read_text()
    assert second == first


def test_a_changed_trace_is_parsed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache's key holds every trace's size and mtime: a rewritten trace is read anew."""
    sweep = _sweep(tmp_path)
    build_report([sweep], tmp_path / "out")
    _traced_job(sweep, "1", "fsdp1", 900.0, {"iteration_time_s": 0.0060, "breakdown": BREAKDOWN})
    parsed: list[Path] = []
    from harness.trace import parse

    real = parse._read

    def counted(path: Path):  # type: ignore[no-untyped-def]
        parsed.append(Path(path))
        return real(path)

    monkeypatch.setattr("harness.trace.parse._read", counted)
    text = build_report([sweep], tmp_path / "out").read_text()
    assert {p.parent.parent.name for p in parsed} == {"1"}  # job 0's traces stay cached
    assert "+0.0009" in text or "+0.0004" in text


def test_the_why_lines_are_the_stored_ones(tmp_path: Path) -> None:
    """The yafsdp job's prediction.json holds why-lines for each baseline; the report prints
    them as stored. A job without prediction.json (older) says it has none."""
    sweep = _sweep(tmp_path)
    text = build_report([sweep], tmp_path / "out").read_text()
    assert "no why-lines stored: the yafsdp job predates prediction.json" in text
    assert "python -m harness.plan --why llama_tiny gpus=2 seq=128 ckpt=0" in text
    terms = {"iteration_time_s": 0.0052, "breakdown": BREAKDOWN}
    stored = Prediction(terms=terms, why={"fsdp1": ["fsdp1 is predicted slower", "  because"]})
    write_prediction(sweep / "0", stored)
    assert read_prediction(sweep / "0") == stored
    text = build_report([sweep], tmp_path / "out2").read_text()
    assert "    fsdp1 is predicted slower\n      because" in text
    assert "no why-lines stored" not in text
