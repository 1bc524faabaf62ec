"""The notebooks run where users run them: from `notebooks/` (as `jupytext --execute` runs
them) with paths relative to the repository root, and as scripts, printing each
picture's path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results.latest import latest_sweep, matched_traced_jobs, repo_path
from tests.notebooks import run_notebook

ROOT = Path(__file__).resolve().parents[2]


def _job(sweep: Path, name: str, engine: str, seq_len: int, traced: bool = True) -> Path:
    job = sweep / name
    (job / "traces").mkdir(parents=True)
    config = {"model": "llama_tiny", "gpus": 2, "seq_len": seq_len, "ckpt_layers": 0,
              "engine": {"label": engine}}  # fmt: skip
    (job / "result.json").write_text(json.dumps({"status": "ok", "config": config}))
    if traced:
        (job / "traces" / "rank0.json.gz").write_bytes(b"")
    return job


def test_the_last_sweep_and_its_matched_traced_jobs(tmp_path: Path) -> None:
    old = tmp_path / "multirun" / "old"
    _job(old, "a", "yafsdp", 64)
    (old / "multirun.yaml").write_text("")
    new = tmp_path / "multirun" / "2026-01-01" / "12-00-00"
    (new / "multirun.yaml").parent.mkdir(parents=True)
    (new / "multirun.yaml").write_text("")
    _job(new, "y128", "yafsdp", 128)
    _job(new, "untraced", "fsdp1", 64, traced=False)
    jobs = [_job(new, "y64", "yafsdp", 64), _job(new, "f64", "fsdp2", 64)]
    os.utime(jobs[1] / "traces" / "rank0.json.gz", ns=(2 * 10**18, 2 * 10**18))  # the newest
    assert latest_sweep(tmp_path / "multirun") == new
    assert set(matched_traced_jobs(new)) == set(jobs)  # the newest traced point, every engine


def test_relative_paths_resolve_against_the_repository_root(monkeypatch) -> None:
    monkeypatch.chdir(ROOT / "notebooks")
    assert repo_path("reports/cpu_demo") == ROOT / "reports" / "cpu_demo"
    assert repo_path("trace_inspection.py") == ROOT / "notebooks" / "trace_inspection.py"


@pytest.fixture()
def jobs_in_the_repo(cpu_jobs) -> list[str]:
    """The traced CPU jobs copied below the repository root (outputs/, ignored by git), named
    by paths relative to it."""
    where = ROOT / "outputs" / f"test-notebooks-{os.getpid()}"
    for name, job in cpu_jobs.items():
        shutil.copytree(job, where / name)
    yield [str((where / name).relative_to(ROOT)) for name in cpu_jobs]
    shutil.rmtree(where)


def test_trace_notebook_runs_from_notebooks_dir_with_root_relative_paths(
    jobs_in_the_repo, monkeypatch
) -> None:
    monkeypatch.setenv("TRACE_JOB_DIR", os.pathsep.join(jobs_in_the_repo))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    # the working directory jupytext --execute gives: the notebook's folder
    nb = run_notebook(ROOT / "notebooks/trace_inspection.py", ROOT / "notebooks")
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs)


def test_as_scripts_the_notebooks_print_their_pictures_paths(cpu_jobs, tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg",
           "TRACE_JOB_DIR": os.pathsep.join(map(str, cpu_jobs.values()))}  # fmt: skip
    proc = subprocess.run([sys.executable, "notebooks/trace_inspection.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "IPython.core.display.Image object" not in proc.stdout
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("picture: ")]
    assert Path(line.removeprefix("picture: ")).is_file()


def test_a_missing_trace_says_what_was_looked_for_and_where(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg",
           "TRACE_JOB_DIR": str(tmp_path / "nothing")}  # fmt: skip
    script = ROOT / "notebooks/trace_inspection.py"
    proc = subprocess.run([sys.executable, script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode != 0
    assert f"no traces/rank<r>.json[.gz] in {tmp_path / 'nothing'}" in proc.stderr
