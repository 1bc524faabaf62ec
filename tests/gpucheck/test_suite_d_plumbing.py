"""Suite D's row around the give-way probe, on CPU with the probe replaced by one that writes
a hand-built calibration: the row passes only with every constant measured, and the file
lands beside the report and in $OUT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.gpucheck import suite_d
from harness.plan.calibrate import give_way_probe
from harness.plan.calibrate.calibration import SCHEMA


def _fake_probe(section: dict):
    def probe(argv: list[str]) -> int:
        out = Path(argv[argv.index("-o") + 1])
        assert argv[argv.index("--model") + 1] == suite_d.MODEL
        out.write_text(json.dumps({"schema": SCHEMA, "give_way": section}))
        return 0

    return probe


ALL = {key: 1.0 for key in suite_d.MEASURED} | {"sm_count": 132, "device": "fake"}


def test_a_full_measurement_passes_and_is_written_twice(tmp_path, monkeypatch):
    monkeypatch.setattr(give_way_probe, "main", _fake_probe(ALL))
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    (tmp_path / "out").mkdir()
    verdict = suite_d.check(tmp_path / "dev")
    assert verdict.ok, verdict.detail
    assert verdict.figures["sm_count"] == 132
    assert set(suite_d.MEASURED) <= set(verdict.figures)
    for folder in (tmp_path / "dev", tmp_path / "out"):
        assert json.loads((folder / suite_d.FILE).read_text())["give_way"]["device"] == "fake"


@pytest.mark.parametrize("dropped", suite_d.MEASURED)
def test_a_constant_left_unmeasured_fails_the_row(tmp_path, monkeypatch, dropped):
    section = {k: v for k, v in ALL.items() if k != dropped}
    monkeypatch.setattr(give_way_probe, "main", _fake_probe(section))
    monkeypatch.delenv("OUT", raising=False)
    verdict = suite_d.check(tmp_path)
    assert not verdict.ok and dropped in verdict.detail


def test_a_refusing_probe_fails_the_row(tmp_path, monkeypatch):
    monkeypatch.setattr(give_way_probe, "main", lambda argv: 2)
    monkeypatch.delenv("OUT", raising=False)
    verdict = suite_d.check(tmp_path)
    assert not verdict.ok and "exited 2" in verdict.detail
