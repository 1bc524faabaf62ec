"""fault.kind=delay on CUDA delays the device's stream inside the range, for the cycles the
device's measured clock spins in fault.ms; the host does not sleep."""

from __future__ import annotations

import time
from contextlib import contextmanager
from unittest import mock

import pytest
import torch

from harness.config import FaultConfig
from harness.rank import faults

CUDA = torch.device("cuda", 0)
FAULT = FaultConfig(kind="delay", where="yafsdp.forward", ms=4.0, rank=1, step=3)


@pytest.fixture
def device_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    log: list[str] = []
    sleep = mock.create_autospec(torch.cuda._sleep, side_effect=lambda c: log.append(f"spin {c}"))
    monkeypatch.setattr(torch.cuda, "_sleep", sleep)
    clock = mock.create_autospec(
        faults.cycles_per_second, side_effect=lambda d: log.append("clock") or 1.5e9
    )
    monkeypatch.setattr(faults, "cycles_per_second", clock)
    monkeypatch.setattr(time, "sleep", mock.create_autospec(
        time.sleep, side_effect=AssertionError("the host slept")))  # fmt: skip
    return log


def _range(log: list[str]):
    @contextmanager
    def record_function(name: str):
        log.append(f"enter {name}")
        yield
        log.append(f"exit {name}")

    return record_function


def test_on_cuda_the_stream_spins_inside_the_range(monkeypatch, device_sleeps) -> None:
    delay = faults._Delay()
    monkeypatch.setattr(faults, "_DELAY", delay)
    monkeypatch.setattr(faults, "_wrap_record_function", lambda d: None)
    faults.arm_delay(FAULT, rank=1, step=0, device=CUDA)  # a warm-up step: clock only
    delay.maybe_sleep("yafsdp.forward.unit2", _range(device_sleeps))
    assert device_sleeps == ["clock"]
    faults.arm_delay(FAULT, rank=1, step=3, device=CUDA)
    delay.maybe_sleep("yafsdp.backward.unit2", _range(device_sleeps))  # another range
    delay.maybe_sleep("yafsdp.forward.unit2", _range(device_sleeps))
    delay.maybe_sleep("yafsdp.forward.unit3", _range(device_sleeps))  # once a step
    cycles = int(4e-3 * 1.5e9)
    assert device_sleeps == ["clock", "enter fault.delay", f"spin {cycles}", "exit fault.delay"]
    faults.arm_delay(FAULT, rank=1, step=4, device=CUDA)  # the clock is measured once
    assert device_sleeps.count("clock") == 1


def test_another_rank_measures_nothing(monkeypatch, device_sleeps) -> None:
    delay = faults._Delay()
    monkeypatch.setattr(faults, "_DELAY", delay)
    faults.arm_delay(FAULT, rank=0, step=3, device=CUDA)
    assert device_sleeps == [] and not delay.armed
