"""NVML in a container: it lists host PIDs in no promised order, so a job in another PID
namespace can count the other processes on its GPU but cannot tell their memory from its
own; it records the count and says the memory is unknown."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch
import torch.distributed as dist

from harness.rank import nvml_watch
from harness.rank.interference import Window, reduce_interference
from harness.rank.nvml_watch import GpuWatch

GIB = 2**30


class Nvml(types.SimpleNamespace):
    """pynvml's few calls, listing (host pid, bytes) in the order given."""

    NVML_CLOCK_SM = 1

    def __init__(self, listed: list[tuple[int, int]]) -> None:
        super().__init__(listed=listed)

    def nvmlInit(self) -> None:  # noqa: N802
        pass

    def nvmlDeviceGetClockInfo(self, handle: Any, kind: int) -> int:  # noqa: N802
        return 1980

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:  # noqa: N802
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:  # noqa: N802
        return [types.SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in self.listed]


def _watch(monkeypatch, listed: list[tuple[int, int]], own: set[int], ranks_here: int):
    monkeypatch.setitem(sys.modules, "pynvml", Nvml(listed))
    monkeypatch.setattr(nvml_watch, "_handle", lambda nvml, index: "handle")
    watch = GpuWatch.open(0, frozenset(own), ranks_here=ranks_here)
    watch.sample()
    return watch


@pytest.mark.parametrize(
    "listed",
    [
        # host PIDs: our two ranks hold 60 GiB each, an intruder 1 GiB; in any order
        [(9001, 60 * GIB), (9002, 60 * GIB), (7777, 1 * GIB)],
        [(7777, 1 * GIB), (9001, 60 * GIB), (9002, 60 * GIB)],
    ],
)
def test_in_a_container_the_others_are_counted_and_their_memory_is_not_guessed(
    monkeypatch, listed
) -> None:
    summary = _watch(monkeypatch, listed, own={10, 11}, ranks_here=2).summary()
    assert summary["other_processes"] == 1
    assert summary["other_memory_bytes"] is None and summary["pid_namespace"] == "foreign"


def test_where_our_pids_are_seen_the_others_memory_is_exact(monkeypatch) -> None:
    listed = [(7777, 1 * GIB), (10, 60 * GIB), (11, 60 * GIB)]
    summary = _watch(monkeypatch, listed, own={10, 11}, ranks_here=2).summary()
    assert (summary["other_processes"], summary["other_memory_bytes"]) == (1, GIB)
    assert "pid_namespace" not in summary


def test_the_job_record_says_the_memory_is_unknown(monkeypatch) -> None:
    watch = _watch(monkeypatch, [(7777, GIB), (9001, 60 * GIB)], own={10}, ranks_here=1)
    window = Window.start(watch).stop()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        gpu = reduce_interference(window, torch.device("cpu"), local_rank=0)["gpu"]
    finally:
        dist.destroy_process_group()
    assert gpu["other_processes"] == 1
    assert gpu["other_memory_bytes"] is None and gpu["pid_namespace"] == "foreign"
