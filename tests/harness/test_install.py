"""`make install` does what the README says: the CPU torch wheel where there is no GPU,
pip's own index when that index cannot serve it, and the transformers the GPU machine gets."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = ["make", "--no-print-directory", *args]
    return subprocess.run(command, cwd=REPO, env=env or dict(os.environ),
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def test_without_nvidia_smi_torch_comes_from_the_cpu_wheel_index(tmp_path: Path) -> None:
    no_gpu = {**os.environ, "PATH": "/usr/bin:/bin"}
    dry = _make("-n", "install-torch", f"VENV={tmp_path}", env=no_gpu).stdout
    assert '--index-url "https://download.pytorch.org/whl/cpu"' in dry
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\n")
    (fake / "nvidia-smi").chmod(0o755)
    gpu = {**os.environ, "PATH": f"{fake}:/usr/bin:/bin"}
    dry = _make("-n", "install-torch", f"VENV={tmp_path}", env=gpu).stdout
    assert "--index-url" not in dry.split("else")[0] and '[ -z "" ]' in dry


@pytest.mark.slow
def test_an_index_that_cannot_serve_torch_falls_back_to_pips_own(tmp_path: Path) -> None:
    """Here only a local mirror is reachable: the CPU index fails, and pip's own index (the
    mirror) serves the package. A small package stands in for torch."""
    mirror = Path("/opt/pypi/simple")
    if not mirror.is_dir():
        pytest.skip("needs this machine's local mirror to stand in for pip's own index")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin/python"),
                    "--version"], check=True, capture_output=True)  # fmt: skip
    (venv / "bin/pip").write_text(
        f'#!/bin/sh\nexec {sys.executable} -m pip --python {venv / "bin/python"} "$@"\n'
    )
    (venv / "bin/pip").chmod(0o755)
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "",
           "PIP_INDEX_URL": f"file://{mirror}", "PIP_RETRIES": "0"}  # fmt: skip
    proc = _make("install-torch", f"VENV={venv}", "TORCH_SPEC=six==1.17.0",
                 "TORCH_INDEX=http://127.0.0.1:9/whl/cpu", env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "did not serve six==1.17.0; using pip's own index" in proc.stderr
    assert list((venv / "lib").glob("python*/site-packages/six.py"))


def test_transformers_is_pinned_as_gpu_wheels_pins_it() -> None:
    makefile = (REPO / "Makefile").read_text()
    (gpu_pin,) = re.findall(r"transformers==([\d.]+)", makefile)
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f'"transformers=={gpu_pin}"' in pyproject
