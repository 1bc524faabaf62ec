"""Local multiruns: results.csv, failures as rows, resume, and the published preset."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

from tests.processes import run_module

TINY = ("model=llama_tiny", "gpus=2", "warmup_steps=1", "steps=2", "profile.steps=0")


def multirun(*overrides: str, sweep_dir: Path) -> subprocess.CompletedProcess:
    proc = run_module("harness", "-m", *overrides, f"hydra.sweep.dir={sweep_dir}", timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def rows(sweep_dir: Path) -> list[dict[str, str]]:
    with open(sweep_dir / "results.csv") as f:
        return list(csv.DictReader(f))


def test_sweep_writes_rows_and_resume_skips_finished_jobs(tmp_path: Path) -> None:
    grid = ("engine=local,fsdp2", "seq_len=32,64")
    multirun(*TINY, *grid, sweep_dir=tmp_path)
    table = rows(tmp_path)
    assert len(table) == 4
    assert {r["status"] for r in table} == {"ok"}
    assert {(r["engine"], r["seq_len"]) for r in table} == {
        (e, s) for e in ("local", "fsdp2") for s in ("32", "64")
    }
    results = sorted(tmp_path.glob("*/result.json"))
    stamps = {p: p.stat().st_mtime_ns for p in results}

    # One job's result is corrupted (a half-written file): only that job runs again.
    victim = results[0]
    victim.write_text('{"schema_version": 1, "status": "o')
    proc = multirun(*TINY, *grid, sweep_dir=tmp_path)
    job_lines = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert sum("s/step  earlier result kept" in line for line in job_lines) == 3
    assert sum(" ok  " in line and "earlier" not in line for line in job_lines) == 1, (
        "a skipped job must not read as run"
    )
    assert "rerunning: stored result is unusable" in proc.stdout
    for path in results:
        if path == victim:
            assert json.loads(path.read_text())["status"] == "ok"
        else:
            assert path.stat().st_mtime_ns == stamps[path], f"{path} was rerun"
    assert len(rows(tmp_path)) == 4


def test_failing_jobs_become_rows_and_the_sweep_goes_on(tmp_path: Path) -> None:
    proc = multirun(*TINY, "engine=fsdp2", "+drill=crash,hang,oom,invalid,kill", sweep_dir=tmp_path)
    by_drill = {}
    for path in tmp_path.glob("*/result.json"):
        # Job directories are named by their overrides: "+drill=crash,engine=fsdp2,...".
        drill = path.parent.name.split("+drill=")[1].split(",")[0]
        by_drill[drill] = json.loads(path.read_text())
    status = {drill: r["status"] for drill, r in by_drill.items()}
    assert status == {
        "crash": "failed",
        "hang": "timeout",
        "oom": "oom",
        "invalid": "invalid",
        "kill": "failed",
    }
    errors = {drill: r["error"] for drill, r in by_drill.items()}
    assert "rank 1" in errors["crash"] and "injected crash" in errors["crash"]
    assert "memory_limit_gb" in errors["oom"]
    assert "ckpt_layers=99" in errors["invalid"]
    assert errors["kill"].startswith("rank 1 was killed (SIGKILL)"), errors["kill"]
    table = rows(tmp_path)
    assert sorted(r["status"] for r in table) == ["failed", "failed", "invalid", "oom", "timeout"]
    assert f"results:   {tmp_path / 'results.csv'}" in proc.stdout


def test_published_preset_expands_to_16_points_per_engine(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    # allow_failures: jobs refused by this machine alone (checked below) end the sweep with 2
    proc = multirun(
        "experiment=yafsdp_readme", "dry_run=true", "allow_failures=true", sweep_dir=sweep
    )
    jobs = [line for line in proc.stdout.splitlines() if "  dry run -> " in line]
    assert len(jobs) == 16 * 3
    # The planner's memory row is printed for each; a job predicted not to fit 80 GB is
    # refused, naming the fewest checkpointed layers that would. A dry run also checks what
    # the real run would here: where this machine lacks the A100s, it says so.
    assert proc.stdout.count("planner: peak ") == 16 * 3
    refused = [line for line in jobs if not line.endswith("[ok]")]
    fit, machine = "the smallest ckpt_layers that fits is ", "on this machine"
    assert all(fit in line or machine in line or "this machine has none" in line
               for line in refused)  # fmt: skip
    assert jobs[0].startswith("[ 1/48] ") and jobs[-1].startswith("[48/48] ")
    points = {line.split("] ")[1].rsplit(" ", 1)[0] for line in (j.split("  ")[0] for j in jobs)}
    assert len(points) == 16
    published = "] llama2_70b gpus=256 seq=4096 ckpt=50 yafsdp  dry run"
    assert sum(published in line for line in jobs) == 1
    assert not sweep.exists(), "a dry run must leave nothing behind"
    assert "never finished" not in proc.stdout + proc.stderr
