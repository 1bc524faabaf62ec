"""DeepSpeed runs on the GPU the harness placed the rank on: it takes its device from
$LOCAL_RANK, which is not that GPU's index where ranks share one GPU (gloo) or a cluster
binds one GPU per task. Checked on CPU with DeepSpeed's entry points autospec'd."""

from __future__ import annotations

import os
from unittest import mock

import pytest
import torch

from harness.config import JobConfig
from harness.engines import deepspeed as adapter
from harness.engines.registry import ENGINES
from harness.models.build import build_job_model
from harness.rank.session import engine_context

deepspeed = pytest.importorskip("deepspeed")


class Stop(Exception):
    """Ends the wrap once DeepSpeed's engine would be made: what is checked came before."""


@pytest.mark.parametrize("local_rank, index", [("2", 0), ("1", 1), ("0", 0)])
def test_deepspeed_sees_the_placed_gpu(monkeypatch, local_rank: str, index: int) -> None:
    monkeypatch.setenv("LOCAL_RANK", local_rank)  # what the launcher set
    seen: list[tuple[str, str]] = []

    def materialise(model, ctx, config) -> None:
        seen.append(("zero.Init", os.environ["LOCAL_RANK"]))

    def initialize(*args, **kwargs):
        seen.append(("initialize", os.environ["LOCAL_RANK"]))
        raise Stop

    monkeypatch.setattr(adapter, "materialise_into_zero", mock.create_autospec(
        adapter.materialise_into_zero, side_effect=materialise))  # fmt: skip
    monkeypatch.setattr(deepspeed, "initialize", mock.create_autospec(
        deepspeed.initialize, side_effect=initialize))  # fmt: skip
    cfg = JobConfig(model="llama_tiny", engine=ENGINES["deepspeed"].config(), gpus=3,
                    device="cuda", backend="gloo")  # fmt: skip
    device = torch.device("cuda", index)  # the harness's placement (round robin under gloo)
    ctx = engine_context(cfg, rank=int(local_rank), world_size=3, device=device)
    model, _ = build_job_model("llama_tiny", "native")
    with pytest.raises(Stop):
        adapter.DeepSpeedEngine().wrap(model, ctx)
    assert seen == [("zero.Init", str(index)), ("initialize", str(index))]
    assert os.environ["LOCAL_RANK"] == str(index)  # ZeRO-3 reads it during the steps too


def test_on_cpu_the_launcher_s_local_rank_stays() -> None:
    env = {"LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "2"}
    adapter.use_placed_gpu(torch.device("cpu"), env)
    assert env == {"LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "2"}
    adapter.use_placed_gpu(torch.device("cuda", 0), env)
    assert env == {"LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}
