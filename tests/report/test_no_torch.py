"""The report and the results table run where torch cannot be imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GUARD = "import sys\nsys.modules['torch'] = None  # any `import torch` now raises ImportError\n"


def run_without_torch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    guard_dir = tmp_path / "guard"
    guard_dir.mkdir(exist_ok=True)
    (guard_dir / "sitecustomize.py").write_text(GUARD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(guard_dir), str(REPO)])}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=tmp_path
    )


def test_the_guard_blocks_torch(tmp_path: Path) -> None:
    proc = run_without_torch(tmp_path, "-c", "import torch")
    assert proc.returncode != 0 and "import of torch halted" in proc.stderr


def test_report_and_results_run_without_torch(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_without_torch(tmp_path, "-m", "harness.report", str(sweep), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"report written to {out / 'report.md'}"
    assert (
        "| llama_tiny | 2 | 128 | 0 | 10.00%, 1 repeat (run-to-run noise not measured) "
        "| 0.9000 | 1.000 |"
    ) in (out / "report.md").read_text()
    proc = run_without_torch(tmp_path, "-m", "harness.results", str(sweep))
    assert proc.returncode == 0, proc.stderr
    assert (sweep / "results.csv").exists()
    proc = run_without_torch(
        tmp_path,
        "-c",
        "import harness.report, harness.results.table, sys; "
        "assert not [m for m in sys.modules if m.split('.')[0] == 'torch' and sys.modules[m]]",
    )
    assert proc.returncode == 0, proc.stderr
