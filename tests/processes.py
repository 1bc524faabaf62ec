"""Run the project's command-line entry points as a user would: a fresh Python process in
the repository, with this checkout first on the import path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_module(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python -m <args>` in the repository root; output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def signal_masks(pid: int) -> str:
    """The process's blocked, ignored and caught signal masks (Linux /proc), for a test that
    signals it to say why the signal did nothing; empty where /proc cannot tell."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return ""
    return " ".join(line for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


@contextmanager
def stop_signals_reach_children() -> Iterator[None]:
    """Children started inside get SIGINT and SIGHUP at their defaults, as a command typed at
    a terminal does, whatever this pytest was started with: `nohup make test &` from a
    script ignores both, a child keeps an ignored signal across exec, and Python then never
    raises KeyboardInterrupt in it. A Python handler is not inherited (the child gets the
    default), so each ignored signal gets one here while the children start."""
    ours = {signal.SIGINT: signal.default_int_handler, signal.SIGHUP: _ignore}
    ignored = [sig for sig in ours if signal.getsignal(sig) == signal.SIG_IGN]
    for sig in ignored:
        signal.signal(sig, ours[sig])
    try:
        yield
    finally:
        for sig in ignored:
            signal.signal(sig, signal.SIG_IGN)


def _ignore(_signum: int, _frame: object) -> None:
    """As SIG_IGN, in this process only."""
