"""Peak RSS restarts after warm-up, so memory only an earlier phase held does not count."""

from __future__ import annotations

import sys

import pytest
import torch

from harness.rank.host_usage import peak_rss_bytes, reset_peak_rss
from tests.cuda_fakes import fake_cuda

MIB = 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM reset is Linux-only")
def test_reset_forgets_memory_freed_before_it() -> None:
    block = torch.ones(256 * MIB // 4)  # 256 MiB, touched
    before = peak_rss_bytes()
    del block
    assert reset_peak_rss()
    after = peak_rss_bytes()
    assert after < before - 200 * MIB
    block = torch.ones(64 * MIB // 4)
    assert peak_rss_bytes() >= after + 60 * MIB
    assert block.sum() == 64 * MIB // 4


def test_memory_outside_the_allocator_is_only_told_with_a_device_per_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The device's used memory less what the allocator reserved; where ranks share a
    device, its used memory is theirs together, and no figure is given."""
    from harness.rank.memory_peaks import cuda_memory_outside_allocator

    gib = 2**30
    fake_cuda(monkeypatch, "device_count", 2)
    fake_cuda(monkeypatch, "mem_get_info", (60 * gib, 80 * gib))
    fake_cuda(monkeypatch, "memory_reserved", 18 * gib)
    device = torch.device("cuda", 0)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert cuda_memory_outside_allocator(device) == 2 * gib
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    assert cuda_memory_outside_allocator(device) is None
