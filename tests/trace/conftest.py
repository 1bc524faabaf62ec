import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trace.profiled_jobs import PROFILED_ENGINES, profiled_tiny_jobs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cpu_jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two real 2-rank gloo CPU jobs (engines 'blocking' and 'overlapped') with traces."""
    out = tmp_path_factory.mktemp("cpu_jobs")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, str(ROOT / "tests/trace/make_cpu_jobs.py"), str(out)],
        check=True, env=env, timeout=300, capture_output=True,
    )  # fmt: skip
    return {name: out / name for name in ("blocking", "overlapped")}


@pytest.fixture(scope="session")
def profiled_jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One real profiled llama_tiny job per engine of PROFILED_ENGINES, made once."""
    return profiled_tiny_jobs(tmp_path_factory.mktemp("profiled_jobs"), PROFILED_ENGINES)
