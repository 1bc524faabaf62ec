"""A report that cannot be written where it goes says so and offers `-o` (issue 30, L7)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from harness.jobdir.result import make_result, write_result
from harness.report.__main__ import main


def test_a_read_only_sweep_dir_gives_a_message_with_the_o_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = tmp_path / "sweep"
    write_result(sweep / "job", make_result(status="invalid", config={}, error="x"))
    real_mkdir = Path.mkdir

    def read_only_mkdir(self: Path, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        if self.is_relative_to(sweep):  # the sweep's file system is mounted read-only
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only_mkdir)
    assert main([str(sweep)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write the report to {sweep / 'report'}" in err
    assert "Read-only file system" in err and "-o <dir>" in err
    assert main([str(sweep), "-o", str(tmp_path / "elsewhere")]) == 0
    assert (tmp_path / "elsewhere" / "report.md").exists()
