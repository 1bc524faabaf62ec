"""Peak RSS restarts after warm-up, so memory only an earlier phase held does not count."""

from __future__ import annotations

import sys

import pytest
import torch

from harness.rss import peak_rss_bytes, reset_peak_rss

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
