"""Every test that starts processes is `slow` (`make test-fast` leaves them out; `make test`
and CI run everything).

`make test` runs the suite on three pytest-xdist workers (`--dist loadgroup`), one more than
this machine's two cores: much of its time is spent waiting (on SLURM, on timeouts, on
processes starting), which the other workers' tests fill. Each test is grouped with its
module, so a module's fixtures are built once; the tests that share the session's CPU jobs,
or the one local SLURM node, each run in one worker.

A test is marked when it uses a fixture that starts processes (named below, or one whose
body does as a test's would), or when its body, or a function of its own module that it
calls (followed two calls deep), calls a helper that starts processes: ranks
(`run_on_ranks`, `train_jobs`), the harness's command line (`run_module`, `multirun`), any
subprocess, a gpucheck suite, or a notebook kernel. A test may also be marked by hand with
`@pytest.mark.slow`.
"""

from __future__ import annotations

import functools
import inspect
import re
from types import FunctionType, ModuleType

import pytest

PROCESS_FIXTURES = frozenset({"cpu_jobs", "jobs_in_the_repo", "calibration"})
STARTERS = frozenset({"run_on_ranks", "train_jobs", "run_module", "multirun", "run_harness",
                      "run_notebook", "start_processes", "Popen", "check_output",
                      "profiled_tiny_jobs"})  # fmt: skip
_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
# dotted starters: any subprocess; a gpucheck suite, which runs its engines on ranks
_SUBPROCESS_RUN = re.compile(
    r"\bsubprocess\.(run|Popen|check_call|check_output)\b|\bsuite_[a-z]\.run\("
)


@functools.cache  # a module's helpers are read once, not once per test that calls them
def _source(fn: object) -> str:
    try:
        return inspect.getsource(inspect.unwrap(fn))  # type: ignore[arg-type]
    except (OSError, TypeError):
        return ""


def starts_processes(fn: object, module: ModuleType | None, depth: int = 2) -> bool:
    """Whether `fn` calls a process starter, directly or through its module's functions."""
    source = _source(fn)
    if _SUBPROCESS_RUN.search(source):
        return True
    called = set(_CALL.findall(source))
    if called & STARTERS:
        return True
    if depth == 0 or module is None:
        return False
    for name in called:
        helper = getattr(module, name, None)
        helper = inspect.unwrap(helper) if callable(helper) else helper
        if isinstance(helper, FunctionType) and helper.__module__ == module.__name__:
            if helper is not inspect.unwrap(fn) and starts_processes(helper, module, depth - 1):
                return True
    return False


# First: pytest-xdist's worker turns each test's xdist_group mark into its node id's
# `@group` suffix in its own hook, which would otherwise run before this one adds the marks
# (the root conftest registers before xdist's worker plugin, and pluggy calls the latest
# first), leaving every test its own group.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.Function):
            item.add_marker(pytest.mark.xdist_group(_worker_group(item)))
    items[:] = longest_first(items)
    for item in items:
        if not isinstance(item, pytest.Function) or item.get_closest_marker("slow"):
            continue
        fixtures = set(getattr(item, "fixturenames", ()))
        if (
            fixtures & PROCESS_FIXTURES
            or starts_processes(item.function, item.module)
            or any(_fixture_starts_processes(item, name) for name in fixtures)
        ):
            item.add_marker(pytest.mark.slow)


# The groups that ran longest in `make test` (its --durations, and each group's wall time on
# its worker), longest first. They start first, so that none is left running alone at the
# end; `make test` passes --no-loadscope-reorder, or xdist would start the groups with the
# most tests first. The SLURM group mostly waits on its node, so it leads.
LONGEST_FIRST = (
    "slurm",
    "tests.plan.test_plan_cpu_accuracy",
    "tests.sweep.test_local_sweep",
    "tests.yafsdp_impl.test_engine_parity",
    "tests.sweep.test_aa_check",
    "tests.sweep.test_interrupt_and_lock",
    "tests.trace.test_trace_delay_pair",
    "tests.plan.test_plan_cli",
)


def group_of(item: pytest.Item) -> str:
    marks = [m.args[0] for m in item.iter_markers("xdist_group") if m.args]
    return str(marks[0]) if marks else item.nodeid


def longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The items of LONGEST_FIRST's groups first, in its order; the rest as collected."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    return sorted(items, key=lambda item: rank.get(group_of(item), len(rank)))


# Session fixtures that start jobs: the tests that use one run in one worker (its group).
SHARED_SESSION_FIXTURES = ("cpu_jobs", "profiled_jobs")


def _worker_group(item: pytest.Function) -> str:
    """The xdist group a test runs in: what it shares with other tests, else its module."""
    if item.get_closest_marker("slurm"):
        return "slurm"  # one 2-CPU node: two workers' jobs would queue behind each other
    for fixture in SHARED_SESSION_FIXTURES:  # built once per worker that asks for it
        if fixture in getattr(item, "fixturenames", ()):
            return fixture
    shared = getattr(item.module, "WORKER_GROUP", None)
    if shared:
        return str(shared)  # a module that reads another's cached runs names that module
    return item.module.__name__ if item.module is not None else item.nodeid


def _fixture_starts_processes(item: pytest.Function, name: str) -> bool:
    defs = item._fixtureinfo.name2fixturedefs.get(name) or ()
    for fixturedef in defs:
        func = getattr(fixturedef, "func", None)
        module = inspect.getmodule(func) if func is not None else None
        if (
            module is not None
            and module.__name__.startswith("tests")
            and starts_processes(func, module)
        ):
            return True
    return False
