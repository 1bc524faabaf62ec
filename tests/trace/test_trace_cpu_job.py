"""Real 2-rank gloo traces analysed end to end, through the API, the CLI and the notebook."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.jobdir.result import read_result
from harness.trace import summarize_job
from harness.trace.__main__ import main
from tests.notebooks import run_notebook

ROOT = Path(__file__).resolve().parents[2]


def test_profile_field_has_every_rank_and_step(cpu_jobs):
    for engine, job_dir in cpu_jobs.items():
        profile = read_result(job_dir / "result.json").profile.to_dict()
        assert profile == json.loads(json.dumps(summarize_job(job_dir)))
        assert profile["traces"] == ["traces/rank0.json.gz", "traces/rank1.json.gz"]
        assert profile["kind"] == "cpu"
        assert {(r["rank"], r["step"]) for r in profile["steps"]} == {
            (0, 1),
            (0, 2),
            (1, 1),
            (1, 2),
        }
        s = profile["summary"]
        assert s["comm_s_per_step"] > 0 and s["compute_s_per_step"] > 0
        for row in profile["steps"]:
            busy = row["compute_s"] + row["comm_s"] - row["overlap_s"] + row["idle_s"]
            assert busy == pytest.approx(row["window_s"], rel=1e-6)
            assert row["exposed_comm_s"] == pytest.approx(row["comm_s"] - row["overlap_s"])
        print(f"{engine}: overlap {s['overlap_pct']:.1f}%, exposed comm "
              f"{s['exposed_comm_s_per_step'] * 1e3:.2f} ms/step")  # fmt: skip


def test_blocking_collectives_do_not_overlap(cpu_jobs):
    s = summarize_job(cpu_jobs["blocking"])["summary"]
    # the main thread waits while gloo runs; only scheduler noise can overlap
    assert s["overlap_pct"] < 10.0


def test_units_are_attributed_from_annotations(cpu_jobs):
    units = summarize_job(cpu_jobs["overlapped"])["units"]
    rs = {(u["rank"], u["unit"]) for u in units if u["kind"] == "reduce_scatter"}
    # these jobs name units as traces before module paths did: as they are, no layout known
    assert rs == {(r, f"unit{u}") for r in (0, 1) for u in range(6)}
    assert all(u["comm_s"] > 0 for u in units if u["kind"] == "reduce_scatter")
    assert all(u["comm_s"] == 0 for u in units if u["kind"] == "forward")


def test_cli_summarize_job_and_trace(cpu_jobs, capsys):
    assert main(["summarize", str(cpu_jobs["overlapped"]), "--units"]) == 0
    out = capsys.readouterr().out
    pct = summarize_job(cpu_jobs["overlapped"])["summary"]["overlap_pct"]
    assert f"overlap {pct:.1f}%" in out
    assert "| rank" in out and "exposed_comm_ms" in out and "yafsdp.reduce_scatter.unit3" in out
    assert main(["summarize", str(cpu_jobs["blocking"] / "traces/rank1.json.gz"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rank"] == 1


def test_cli_reports_bad_trace_and_exits_nonzero(tmp_path, capsys):
    bad = tmp_path / "rank0.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    assert main(["summarize", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err


def test_cli_timeline_module_entry(cpu_jobs, tmp_path):
    out = tmp_path / "tl.png"
    dirs = [str(cpu_jobs["blocking"]), str(cpu_jobs["overlapped"])]
    subprocess.run(
        [sys.executable, "-m", "harness.trace", "timeline", *dirs, "-o", str(out)],
        check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    h, w = matplotlib.image.imread(out).shape[:2]
    assert w > 1000 and h > 400  # two panels of several lanes


def test_notebook_runs(cpu_jobs, monkeypatch):
    monkeypatch.setenv("TRACE_JOB_DIR", os.pathsep.join(map(str, cpu_jobs.values())))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    nb = run_notebook(ROOT / "notebooks/trace_inspection.py", ROOT)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "".join(str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "toy per-layer async all-reduce" in text and "overlap_pct" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert (cpu_jobs["blocking"] / "traces/timeline.png").is_file()
