"""The planner's table reads true: a tight fit says so, a row that cannot run shows no
time, columns are explained, `--brief`/`--why` trim it, and a calibration from other
hardware is refused (or, when allowed, warned about on the first line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.plan.cli import main

H100_8B = ["hardware=h100_80gb", "model=llama3_8b", "gpus=64", "seq_len=8192", "ckpt_layers=0"]


def _table(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


def _cells(header: str, line: str) -> dict[str, str]:
    """A table row's cells by column name (columns are right-aligned under the header)."""
    names = ["model", "gpus", "seq", "ckpt", "engine", "master", "s.grads", "optim",
             "u.weights", "u.grads", "staging", "act.ckpt", "act.plain", "logits", "ovh",
             "peak GiB", "reserved", "plan", "smallest plan", "fits", "min ckpt", "iter s",
             "compute", "exp.comm", "other", "stall", "tok/s", "MFU", "speedup"]  # fmt: skip
    cells, pos = {}, 0
    for name in names:
        end = header.index(name, pos) + len(name)
        cells[name] = line[pos:end].strip()
        pos = end
    cells["speedup"] = line[header.index("speedup") - 30 :].split("  ")[-1].strip()
    return cells


def test_a_peak_of_90_percent_or_more_is_tight_not_yes(capsys) -> None:
    code, lines, _ = _table(capsys, *H100_8B, "engine=fsdp1", "--brief")
    assert code == 0
    row = _cells(lines[0], lines[2])
    assert float(row["peak GiB"]) >= 0.9 * 80
    assert row["fits"] == "tight"
    assert main(["--json", *H100_8B, "engine=fsdp1"]) == 0
    (as_json,) = json.loads(capsys.readouterr().out)
    assert as_json["fit_verdict"] == "tight" and as_json["fits"] is True


def test_rows_that_do_not_fit_show_no_time_mfu_or_speedup(capsys) -> None:
    code, lines, _ = _table(capsys, *H100_8B, "engine=yafsdp,fsdp1,fsdp2", "--brief")
    assert code == 0
    rows = {_cells(lines[0], line)["engine"]: _cells(lines[0], line) for line in lines[2:5]}
    for engine in ("yafsdp", "fsdp2"):  # predicted over 80 GiB
        assert rows[engine]["fits"] == "NO"
        assert all(rows[engine][c] == "-" for c in ("iter s", "tok/s", "MFU", "speedup"))
    assert rows["fsdp1"]["iter s"] != "-"


def test_one_legend_line_and_brief_prints_the_table_alone(capsys) -> None:
    code, lines, _ = _table(capsys, *H100_8B, "engine=yafsdp,fsdp1", "ckpt_layers=32")
    assert code == 0
    legend = [line for line in lines if line.startswith("columns:")]
    assert len(legend) == 1
    for abbreviation in ("s.grads", "u.weights", "act.ckpt", "ovh", "exp.comm", "tight"):
        assert abbreviation in legend[0]
    full = len(lines)
    code, brief, _ = _table(capsys, *H100_8B, "engine=yafsdp,fsdp1", "ckpt_layers=32", "--brief")
    assert code == 0 and len(brief) == 5 and brief[-1] == legend[0] and full > 10


def test_why_prints_one_points_explanation(capsys) -> None:
    code, lines, _ = _table(capsys, "experiment=yafsdp_readme", "--why",
                            "model=llama2_7b,gpus=64,seq=4096")  # fmt: skip
    assert code == 0
    assert len(lines) < 40
    assert sum(" llama2_7b " in f" {line} " for line in lines[2:5]) == 3
    assert any(line.startswith("llama2_7b gpus=64 seq=4096 ckpt=0: fsdp1") for line in lines)
    code, _, err = _table(capsys, "experiment=yafsdp_readme", "--why", "model=llama2_7b")
    assert code == 2 and "names 6 points" in err and "llama2_7b gpus=128 seq=8192 ckpt=0" in err
    # the point's words, as the error and the job lines spell it, name it too
    code, again, _ = _table(capsys, "experiment=yafsdp_readme", "--why",
                            "llama2_7b gpus=64 seq=4096 ckpt=0")  # fmt: skip
    assert code == 0 and again == lines


def test_why_plans_the_named_points_rows_alone(capsys, monkeypatch) -> None:
    import harness.plan.cli as cli

    planned: list[int] = []
    real = cli.plan_row
    monkeypatch.setattr(cli, "plan_row", lambda cfg, m: planned.append(cfg.gpus) or real(cfg, m))
    point = ["hardware=a100_80gb", "model=llama2_7b", "gpus=64,128", "engine=yafsdp,fsdp1"]
    code, lines, _ = _table(capsys, *point, "--why", "gpus=64")
    assert code == 0 and planned == [64, 64]
    assert any(line.startswith("llama2_7b gpus=64 seq=") for line in lines)


def _gloo_calibration(tmp_path: Path) -> Path:
    path = tmp_path / "calibration.json"
    rows = [{"bytes": 2**24, "seconds": 0.05}]
    path.write_text(json.dumps({"schema": "yafsdp-bench.calibration/1", "backend": "gloo",
                                "device": "cpu", "world_size": 2, "all_gather": rows,
                                "reduce_scatter": rows}))  # fmt: skip
    return path


def test_a_calibration_from_other_hardware_is_refused(capsys, tmp_path) -> None:
    calibration = f"calibration={_gloo_calibration(tmp_path)}"
    point = ["hardware=a100_80gb", "model=llama2_7b", "gpus=64", "engine=yafsdp"]
    code, _, err = _table(capsys, calibration, *point)
    assert code == 2
    assert "other hardware" in err and "gloo" in err and "--allow-other-hardware" in err
    code, lines, _ = _table(capsys, calibration, *point, "--allow-other-hardware")
    assert code == 0 and lines[0].startswith("WARNING: calibration from other hardware")
    constants = [line for line in lines if "network.nics_per_node" in line]
    assert constants and "replaced by the calibration" in constants[0]
    assert "measured:" not in constants[0]


def test_a_calibration_from_another_gpu_is_refused(tmp_path) -> None:
    from harness.plan.calibrate.calibration import calibration_from, hardware_mismatch

    path = _gloo_calibration(tmp_path)
    data = json.loads(path.read_text()) | {"backend": "nccl", "device": "NVIDIA H100 80GB HBM3"}
    path.write_text(json.dumps(data))
    measured = calibration_from(path)
    assert "H100" in (hardware_mismatch(measured, "cuda", "A100-SXM4-80GB") or "")
    assert hardware_mismatch(measured, "cuda", "H100-SXM5-80GB") is None
