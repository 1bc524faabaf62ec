"""`python -m harness.trace timeline`: a read-only job is drawn somewhere writable and
named, and jobs of different grid points are refused as `why` refuses them."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.jobdir.result import make_result, write_result
from harness.trace.__main__ import main
from tests.trace.synthetic import Kernel, nccl, write_gpu_trace

KERNELS = [Kernel(1, 7, 100, 50), nccl(1, 20, 120, 60), Kernel(2, 7, 300, 50)]


def traced_job(job: Path, engine: str = "yafsdp", seq_len: int = 128) -> Path:
    write_gpu_trace(job / "traces" / "rank0.json.gz", KERNELS, rank=0, world_size=2)
    config = {"model": "llama_tiny", "gpus": 2, "seq_len": seq_len, "ckpt_layers": 0,
              "engine": {"name": engine, "label": engine}}  # fmt: skip
    write_result(job, make_result(status="ok", config=config))
    return job


@pytest.fixture
def read_only_job(tmp_path: Path) -> Iterator[Path]:
    """A traced job on a read-only file system (a tmpfs; root only)."""
    mount = tmp_path / "ro"
    mount.mkdir()
    up = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=False)
    if up.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        traced_job(mount / "job")
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        yield mount / "job"
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_read_only_job_is_drawn_somewhere_writable_and_named(
    read_only_job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main(["timeline", str(read_only_job)]) == 0
    out = capsys.readouterr().out
    written = [Path(w) for w in out.split() if w.endswith(".png")]
    assert written and written[0].is_file(), out
    assert read_only_job not in written[0].parents  # not into the job (nor its traces/)
    assert main(["timeline", str(read_only_job), "-o", str(read_only_job / "t.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write") and "-o" in err and "\n" not in err.strip()


def test_the_default_picture_of_a_job_is_not_put_into_its_traces(tmp_path: Path, capsys) -> None:
    job = traced_job(tmp_path / "job")
    assert main(["timeline", str(job)]) == 0
    written = Path(capsys.readouterr().out.split()[-1])
    assert written.is_file() and written.parent != job / "traces"


def test_jobs_of_different_grid_points_are_refused_as_why_refuses_them(
    tmp_path: Path, capsys
) -> None:
    a = traced_job(tmp_path / "a", "yafsdp", seq_len=128)
    b = traced_job(tmp_path / "b", "fsdp2", seq_len=256)
    assert main(["why", str(a), str(b)]) == 2
    why = capsys.readouterr().err
    assert main(["timeline", str(a), str(b), "-o", str(tmp_path / "t.png")]) == 2
    timeline = capsys.readouterr().err
    assert "different grid points" in why and "different grid points" in timeline, timeline
    assert "seq_len: 128 vs 256" in timeline and not (tmp_path / "t.png").exists()
