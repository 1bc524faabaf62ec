"""End to end: a tiny CPU sweep with traces, then the report built from its files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.processes import REPO
from tests.sweep.test_local_sweep import multirun, rows


def test_tiny_sweep_ends_in_a_report(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = multirun(
        "model=llama_tiny",
        "gpus=2",
        "seq_len=64",
        "warmup_steps=1",
        "steps=3",
        "profile.steps=1",
        "engine=yafsdp,fsdp2",
        sweep_dir=sweep,
    )
    assert "timelines: 1" in proc.stdout
    table = rows(sweep)
    assert [r["status"] for r in table] == ["ok", "ok"]
    assert all(float(r["profile_overlap_pct"]) >= 0 for r in table)
    # yafsdp says where its memory goes, the optimizer's AdamW moments included: two fp32
    # tensors the size of the master shard, as many bytes as master weights + master grads
    # (plus one 4-byte step counter per flat parameter).
    breakdown = json.loads(next(r for r in table if r["engine"] == "yafsdp")["memory_breakdown"])
    assert 0 <= breakdown["optimizer"] - breakdown["master"] < 1024, breakdown

    out = tmp_path / "report"
    report = subprocess.run(
        [sys.executable, "-m", "harness.report", str(sweep), "-o", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr
    text = (out / "report.md").read_text()
    header = (
        "| model | gpu-count | seq-len | num-ckpt-layers | speedup | "
        "YaFSDP iteration time (s) | FSDP iteration time (s) |"
    )
    assert header in text
    row = re.search(r"^\| llama_tiny \| 2 \| 64 \| 0 \| (-?\d+\.\d+)%.*$", text, re.M)
    assert row, text[:3000]
    yafsdp, fsdp = (next(r for r in table if r["engine"] == e) for e in ("yafsdp", "fsdp2"))
    expected = (
        100
        * (float(fsdp["iteration_time_s"]) - float(yafsdp["iteration_time_s"]))
        / float(fsdp["iteration_time_s"])
    )
    assert float(row.group(1)) == round(expected, 2)
    for image in re.findall(r"\]\(([^)]+\.png)\)", text):
        assert (out / image).is_file(), image
    assert "timelines/" in text
