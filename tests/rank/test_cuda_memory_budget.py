"""yafsdp's memory budget on a rank: the smaller of the hardware profile's memory and what
the device has free at build, less a margin (an "80 GB" card is not 80 GiB free)."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import pytest
import torch

from harness.config import JobConfig
from harness.engines.registry import ENGINES
from harness.placement import placed
from harness.plan import planner
from harness.plan.memory.model import yafsdp_budget
from harness.rank.session import engine_context

GIB = 2**30
CUDA = torch.device("cuda", 0)


def _free(free_gib: float) -> mock.MagicMock:
    return mock.create_autospec(
        torch.cuda.mem_get_info, return_value=(int(free_gib * GIB), 80 * GIB)
    )


def _want(cfg: JobConfig, memory: int) -> int:
    case = planner.memory_case(placed(cfg, CUDA), with_budget=False)
    return yafsdp_budget(replace(case, memory_budget_bytes=None), memory)


@pytest.mark.parametrize("profile_gb, free_gib", [(80, 70.5), (80, 79.9), (40, 70.5), (0, 70.5)])
def test_the_budget_reads_the_free_memory_at_build(monkeypatch, profile_gb, free_gib) -> None:
    mem_get_info = _free(free_gib)
    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    cfg = JobConfig(model="llama2_7b", engine=ENGINES["yafsdp"].config(), gpus=8, device="cuda",
                    backend="nccl", device_memory_gb=profile_gb)  # fmt: skip
    ctx = engine_context(cfg, rank=0, world_size=8, device=CUDA)
    usable = int(free_gib * GIB) - planner.BUILD_MARGIN_BYTES
    memory = min(usable, profile_gb * GIB) if profile_gb else usable
    assert ctx.memory_budget_bytes == _want(cfg, memory)
    mem_get_info.assert_called_with(CUDA)


def test_a_plan_made_off_the_gpu_keeps_the_profile(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "mem_get_info", mock.create_autospec(
        torch.cuda.mem_get_info, side_effect=AssertionError("no GPU is asked")))  # fmt: skip
    cfg = JobConfig(device="cuda", backend="nccl", device_memory_gb=80)
    assert planner.device_memory_bytes(cfg) == 80 * GIB
