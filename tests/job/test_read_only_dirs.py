"""A sweep or job directory that cannot be written is refused with a message, never a
traceback (issue 30, L7; the report's side is in tests/report/test_report_output_dir.py)."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import harness.sweep.dirlock as dirlock
from tests.processes import run_module

REFUSED = 3


def test_an_unwritable_directory_cannot_be_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def read_only_open(path, flags, *args):  # type: ignore[no-untyped-def]
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(dirlock.os, "open", read_only_open)
    with pytest.raises(Exception, match="sweep directory .* is not writable") as refused:
        dirlock.acquire(tmp_path, what="sweep directory")
    assert "Read-only file system" in str(refused.value) and "hydra.sweep.dir=" in str(
        refused.value
    )


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A read-only file system holding `sweep/job/` (a tmpfs; root only)."""
    mount = tmp_path / "ro"
    mount.mkdir()
    up = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=False)
    if up.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        (mount / "sweep" / "job").mkdir(parents=True)
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        yield mount / "sweep"
    finally:
        subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.slow
def test_a_read_only_sweep_dir_is_refused_by_a_sweep_and_a_single_run(read_only_dir: Path) -> None:
    job = ("model=llama_tiny", "seq_len=32")
    sweep = run_module("harness", "-m", *job, f"hydra.sweep.dir={read_only_dir}", timeout=300)
    single = run_module("harness", *job, f"hydra.run.dir={read_only_dir / 'job'}", timeout=300)
    for proc, what in ((sweep, "sweep directory"), (single, "job directory")):
        out = proc.stdout + proc.stderr
        assert proc.returncode == REFUSED, out[-2000:]
        assert "Traceback" not in out, out[-2000:]
        assert f"refused: {what} " in proc.stderr and "Read-only file system" in proc.stderr
