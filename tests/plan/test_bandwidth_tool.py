"""`python -m harness.bandwidth`: a calibration measured here, and the planner pricing with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bandwidth import SCHEMA, main
from harness.plan.cli import main as plan_main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def calibration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two gloo ranks started by the tool itself, small messages, few repeats."""
    out = tmp_path_factory.mktemp("cal") / "calibration.json"
    done = subprocess.run(
        [sys.executable, "-m", "harness.bandwidth", "-o", str(out), "--cpu", "--ranks", "2",
         "--repeats", "3", "--max-mib", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "calibration written to" in done.stdout
    return out


def test_the_tool_measures_both_collectives_over_sizes(calibration: Path) -> None:
    data = json.loads(calibration.read_text())
    assert data["schema"] == SCHEMA and data["backend"] == "gloo" and data["world_size"] == 2
    for kind in ("all_gather", "reduce_scatter"):
        rows = data[kind]
        assert [r["bytes"] for r in rows] == sorted(r["bytes"] for r in rows)
        assert len(rows) >= 3 and rows[-1]["bytes"] <= 2**20
        for r in rows:
            assert r["repeats"] == 3
            assert 0 < r["seconds"] <= r["p90_seconds"]
            assert r["bus_gbps"] >= r["p90_bus_gbps"] > 0


def test_the_planner_prices_collectives_with_it_and_says_so(calibration: Path, capsys) -> None:
    point = ["hardware=a100_80gb", "model=llama_small", "gpus=2", "engine=yafsdp", "--json"]
    assert plan_main(point) == 0
    (datasheet,) = json.loads(capsys.readouterr().out)
    assert plan_main([f"calibration={calibration}", *point]) == 2  # gloo CPU, not an A100
    assert "calibration from other hardware" in capsys.readouterr().err
    assert plan_main([f"calibration={calibration}", "--allow-other-hardware", *point]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("WARNING: calibration from other hardware")
    (measured,) = json.loads(captured.out)
    # gloo on CPU is far slower than NVLink: collectives take longer, compute does not
    assert measured["comm_s"] > 10 * datasheet["comm_s"]
    assert measured["breakdown"]["compute"] == datasheet["breakdown"]["compute"]
    origin = measured["constants"]["network.nics_per_node"]["origin"]
    assert origin.startswith("replaced by the calibration:") and str(calibration) in origin
    assert datasheet["constants"]["network.nics_per_node"]["origin"].startswith("datasheet")


def test_bad_input_is_refused_before_any_rank_starts(tmp_path: Path, capsys) -> None:
    assert main(["-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main(["-o", str(tmp_path / "missing" / "cal.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["--repeats", "-1"]) == 2
    assert "must not be negative" in capsys.readouterr().err


def test_a_file_that_is_no_calibration_is_refused(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"hello": 1}))
    assert plan_main([f"calibration={bad}", "hardware=a100_80gb", "model=llama_tiny"]) == 2
    assert "not a calibration file" in capsys.readouterr().err


def test_one_rank_is_refused_it_has_no_bus(tmp_path: Path, capsys) -> None:
    out = tmp_path / "one.json"
    assert main(["-o", str(out), "--cpu", "--ranks", "1"]) == 2
    err = capsys.readouterr().err
    assert "--ranks 1" in err and "--ranks 2" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"world_size": 1}, "world_size=1"),
        ({"all_gather": [{"bytes": 8192, "seconds": 1e-4, "bus_gbps": 0.0}]}, "bus_gbps=0"),
        ({"all_gather": [{"bytes": 8192, "seconds": 0.0, "bus_gbps": 1.0}]}, "seconds=0"),
    ],
)
def test_a_calibration_without_a_bandwidth_is_refused_on_reading(
    tmp_path: Path, change: dict, fragment: str
) -> None:
    from harness.plan.calibrate.calibration import calibration_from

    row = {"bytes": 8192, "seconds": 1e-4, "bus_gbps": 0.04}
    data = {"schema": SCHEMA, "world_size": 2, "gpus_per_node": 2, "nodes": 1,
            "backend": "gloo", "all_gather": [row], "reduce_scatter": [row], **change}  # fmt: skip
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=fragment) as refused:
        calibration_from(path)
    assert "python -m harness.bandwidth" in str(refused.value)
