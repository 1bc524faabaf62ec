"""Real profiled llama_tiny jobs on 2 gloo ranks, one per engine, for the trace tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The engines of the session's `profiled_jobs` (tests/trace/conftest.py).
PROFILED_ENGINES = ("yafsdp", "fsdp2", "fsdp2_tuned")


def profiled_tiny_jobs(out: Path, engines: tuple[str, ...]) -> dict[str, Path]:
    """Each engine's job directory under `out`, two steps profiled after one warm-up."""
    jobs = {}
    for engine in engines:
        job_dir = out / engine
        proc = subprocess.run(
            [sys.executable, "-m", "harness", "model=llama_tiny", f"engine={engine}", "gpus=2",
             "seq_len=128", "warmup_steps=1", "steps=2", "profile.steps=2", "profile.warmup=1",
             f"hydra.run.dir={job_dir}"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        jobs[engine] = job_dir
    return jobs
