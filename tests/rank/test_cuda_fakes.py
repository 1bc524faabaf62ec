"""`tests.cuda_fakes.fake_cuda` refuses, on CPU, the calls the real `torch.cuda` refuses."""

from __future__ import annotations

import pytest
import torch

from tests.cuda_fakes import fake_cuda


def test_a_call_the_real_function_refuses_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cuda(monkeypatch, "mem_get_info", (1, 2))
    assert torch.cuda.mem_get_info(torch.device("cuda", 0)) == (1, 2)
    assert torch.cuda.mem_get_info(device=0) == (1, 2)
    with pytest.raises(TypeError):
        torch.cuda.mem_get_info(0, 1)  # one argument too many
    with pytest.raises(TypeError):
        torch.cuda.mem_get_info(dev=0)  # the keyword is `device`
    # what a lambda stand-in would have let through:
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a, **k: (1, 2))
    assert torch.cuda.mem_get_info(dev=0) == (1, 2)


def test_calls_are_recorded_and_side_effects_run(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    sleep = fake_cuda(monkeypatch, "_sleep", side_effect=seen.append)
    torch.cuda._sleep(5)
    assert seen == [5] and sleep.call_count == 1
    with pytest.raises(TypeError):
        torch.cuda._sleep()  # cycles is required
    history = fake_cuda(monkeypatch, "_record_memory_history", module=torch.cuda.memory)
    torch.cuda.memory._record_memory_history(max_entries=3)
    history.assert_called_once_with(max_entries=3)
    with pytest.raises(TypeError):
        torch.cuda.memory._record_memory_history(entries=3)
