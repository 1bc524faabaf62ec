"""The bandwidth probe gives its buffers back before the engine is built: on CUDA the
caching allocator would keep them, in the build's peaks and out of the free memory that
yafsdp's budget reads."""

from __future__ import annotations

import weakref
from unittest import mock

import pytest
import torch
import torch.distributed as dist

from harness import bandwidth
from harness.config import JobConfig

CUDA = torch.device("cuda", 0)


@pytest.fixture
def one_rank():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_the_probe_s_buffers_are_freed_and_uncached(one_rank, monkeypatch) -> None:
    events: list[str] = []
    buffers: list[weakref.ref] = []
    held: list[torch.Tensor] = []  # as a probe that leaves a buffer in a reference cycle

    def fake_measure(sizes, dtypes, device, repeats):
        assert device == CUDA
        events.append("measure")
        buffer = torch.empty(1024)
        cycle: list = [buffer]
        cycle.append(cycle)
        buffers.append(weakref.ref(buffer))
        return {kind: [] for kind in sizes}

    def empty_cache() -> None:
        events.append("empty_cache")
        assert all(ref() is None for ref in buffers), "a probe buffer is still alive"

    monkeypatch.setattr(bandwidth, "measure", mock.create_autospec(
        bandwidth.measure, side_effect=fake_measure))  # fmt: skip
    monkeypatch.setattr(torch.cuda, "empty_cache", mock.create_autospec(
        torch.cuda.empty_cache, side_effect=empty_cache))  # fmt: skip
    monkeypatch.setattr(bandwidth, "synchronize", lambda device: events.append("sync"))
    result = bandwidth.probe_bandwidth(JobConfig(model="llama_tiny", gpus=1), CUDA)
    assert events == ["measure", "sync", "empty_cache"]
    assert result["world_size"] == 1 and not held


def test_a_probe_on_cpu_asks_no_cuda(one_rank, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "empty_cache", mock.create_autospec(
        torch.cuda.empty_cache, side_effect=AssertionError("CUDA asked on CPU")))  # fmt: skip
    monkeypatch.setattr(bandwidth, "CPU_REPEATS", 1)
    out = bandwidth.probe_bandwidth(JobConfig(model="llama_tiny", gpus=1), torch.device("cpu"))
    assert out["all_gather"] and out["reduce_scatter"]
