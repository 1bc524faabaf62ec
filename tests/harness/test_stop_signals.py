"""Stop signals a process was started ignoring: the runner leaves them ignored (`nohup`),
and the tests that stop a runner start it so that the signal reaches it however pytest
itself was started (`nohup make test &` from a script ignores SIGINT and SIGHUP, and a
child keeps an ignored signal across exec)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from harness import cli
from tests.processes import stop_signals_reach_children

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture
def handlers_restored() -> Iterator[None]:
    before = {sig: signal.getsignal(sig) for sig in STOPS}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _child_sigint_raises() -> bool:
    code = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


def test_the_runner_leaves_an_ignored_sighup_ignored(handlers_restored: None) -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    cli.handle_stop_signals()
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is cli._raise_interrupted


def test_the_runner_takes_sighup_as_an_interrupt_from_a_terminal(handlers_restored: None) -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    cli.handle_stop_signals()
    assert signal.getsignal(signal.SIGHUP) is cli._raise_interrupted


def test_a_runner_started_by_a_test_gets_ctrl_c_though_pytest_ignores_it(
    handlers_restored: None,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a `&` job of a script
    assert not _child_sigint_raises()  # what the interrupt tests saw: the signal ignored
    with stop_signals_reach_children():
        assert _child_sigint_raises()
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # this process as it was
