"""The timed window holds the step alone: rank 0's phase file, the NVML samples and the
step log all happen before a barrier that every rank passes before its timer starts."""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

import pytest
import torch
import torch.distributed as dist

from harness.config import JobConfig
from harness.rank import measure

BOOKKEEPING = ("report", "nvml", "log")


class FakeWindow:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def after_step(self) -> None:
        self.log.append("nvml")

    def stop(self) -> FakeWindow:
        return self


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    events: list[str] = []
    clock = iter(range(1000))

    def perf_counter() -> float:
        events.append("clock")
        return float(next(clock))

    monkeypatch.setattr(measure, "time", SimpleNamespace(perf_counter=perf_counter))
    monkeypatch.setattr(measure, "synchronize", lambda device: events.append("sync"))
    monkeypatch.setattr(measure.Window, "start", lambda gpu=None: FakeWindow(events))
    monkeypatch.setattr(measure, "open_gpu_watch", lambda device, local: None)
    monkeypatch.setattr(measure, "log_step", lambda *a: events.append("log"))
    barrier = mock.create_autospec(
        dist.barrier, side_effect=lambda *a, **k: events.append("barrier")
    )
    monkeypatch.setattr(dist, "barrier", barrier)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(
        dist, "get_backend", mock.create_autospec(dist.get_backend, return_value="nccl")
    )
    return events


def _run(log: list[str], device: torch.device) -> measure.Timed:
    class Steps:
        session = SimpleNamespace(cfg=JobConfig(warmup_steps=1, steps=3), rank=0,
                                  world_size=2, device=device)  # fmt: skip
        steps_run = 1  # the warm-up step came before

        def step(self, step: int) -> None:
            log.append("step")

    return measure.timed_steps(Steps(), lambda phase: log.append("report"))  # type: ignore[arg-type]


@pytest.mark.parametrize("device", [torch.device("cuda", 1), torch.device("cpu")])
def test_no_bookkeeping_between_a_timer_start_and_its_stop(log, device) -> None:
    timed = _run(log, device)
    assert timed.step_times_s == [1.0, 1.0, 1.0]
    clocks = [i for i, e in enumerate(log) if e == "clock"]
    for start, stop in zip(clocks[::2], clocks[1::2], strict=True):
        assert log[start + 1 : stop] == ["step", "sync"]
    # before each timer: the bookkeeping, then the device drained, every rank at a barrier
    # and the device drained again (NCCL's barrier is a kernel)
    for start in clocks[::2]:
        before = log[:start]
        last_bookkeeping = max(i for i, e in enumerate(before) if e in BOOKKEEPING)
        assert before[last_bookkeeping + 1 :] == ["sync", "barrier", "sync"]


def test_nccl_barrier_names_the_rank_s_own_gpu(monkeypatch, log) -> None:
    _run(log, torch.device("cuda", 1))
    dist.barrier.assert_called_with(device_ids=[1])  # type: ignore[attr-defined]
