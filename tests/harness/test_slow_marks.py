"""The rule in tests/conftest.py marks every test that starts processes `slow`, so that
`make test-fast` runs the unit tests alone."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import starts_processes
from tests.distributed import run_on_ranks


def _ranks() -> None:
    run_on_ranks(print, 2)


def _indirect() -> None:
    _ranks()


def _pure() -> int:
    return sum(range(3))


def test_direct_and_indirect_starters_are_found() -> None:
    module = sys.modules[__name__]
    assert starts_processes(_ranks, module)
    assert starts_processes(_indirect, module)  # through a helper of the same module
    assert starts_processes(lambda: subprocess.run(["true"]), module)
    assert not starts_processes(_pure, module)


def test_the_suites_multi_process_tests_are_marked(pytestconfig) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow",
         "tests/yafsdp_impl/test_engine_parity.py", "tests/plan/test_plan_cpu_accuracy.py",
         "tests/report/test_report.py"],
        capture_output=True, text=True, cwd=pytestconfig.rootpath, timeout=300,
    )  # fmt: skip
    marked = proc.stdout
    assert "test_engine_parity.py::test_gathered_shards_equal_the_original_model" in marked
    assert "test_plan_cpu_accuracy.py::test_predicted_peak_is_within_5_percent" in marked
    assert "test_report.py::" not in marked  # hand-built data: a unit test
