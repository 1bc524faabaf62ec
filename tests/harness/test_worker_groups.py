"""`make test` runs on pytest-xdist with `--dist loadgroup`: each test must reach its worker
with the group tests/conftest.py gives it, or the groups (the SLURM node, the shared CPU
jobs, a module's fixtures) are split over workers and built once per worker; and the
longest groups start first."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import pytest

from tests.conftest import LONGEST_FIRST, longest_first


def test_under_loadgroup_a_test_carries_its_modules_group(request: pytest.FixtureRequest) -> None:
    if not getattr(request.config.option, "loadgroup", False):  # set by xdist under -n
        pytest.skip("groups apply under `pytest -n N --dist loadgroup` (make test)")
    assert request.node.nodeid.endswith("@" + __name__), request.node.nodeid


@dataclass
class _Item:
    nodeid: str
    group: str | None = None

    def iter_markers(self, name: str):
        return iter([pytest.mark.xdist_group(self.group).mark] if self.group else [])


def test_the_longest_groups_come_first_and_the_rest_keep_their_order() -> None:
    items = [
        _Item("a::1", "tests.a"),
        _Item("s::1", LONGEST_FIRST[1]),
        _Item("b::1", "tests.b"),
        _Item("slurm::1", LONGEST_FIRST[0]),
        _Item("a::2", "tests.a"),
        _Item("s::2", LONGEST_FIRST[1]),
        _Item("nogroup::1"),
    ]
    ordered = [i.nodeid for i in longest_first(items)]  # type: ignore[arg-type]
    assert ordered == ["slurm::1", "s::1", "s::2", "a::1", "b::1", "a::2", "nogroup::1"]


def test_every_listed_group_is_one_the_suite_has() -> None:
    for name in LONGEST_FIRST:
        assert name == "slurm" or importlib.util.find_spec(name) is not None, name
