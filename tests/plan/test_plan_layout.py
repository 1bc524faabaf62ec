"""At published world sizes the planner's sharded states and buffers are what the engines
themselves lay out, one rank of a fake process group on the meta device."""

from __future__ import annotations

import pytest
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from harness.models.llama import build_model
from harness.plan.memory.model import MemoryCase, held_all_step
from yafsdp_impl import byte_classes

RELATIVE = 0.01


@pytest.fixture
def fake_world(request):
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=request.param)
    yield request.param
    dist.destroy_process_group()


def _planned(model: str, engine: str, world_size: int) -> dict[str, int]:
    case = MemoryCase(model=model, engine=engine, world_size=world_size, seq_len=2048,
                      ckpt_layers=0, dtype="bf16")  # fmt: skip
    return held_all_step(case)


@pytest.mark.parametrize("fake_world", [256], indirect=True)
def test_yafsdp_llama2_70b_on_256_ranks(fake_world: int) -> None:
    from yafsdp_impl import YaFSDP

    model = build_model("llama2_70b", device="meta")
    engine = YaFSDP(model, [model.tok_embeddings, *model.layers, model.output], device="meta")
    laid_out = byte_classes(engine.memory_report())
    planned = _planned("llama2_70b", "yafsdp", fake_world)
    pairs = {
        "weights": planned["unsharded_weights"],
        "grads": planned["unsharded_grads"],
        "master": planned["master"] + planned["sharded_grads"],
        "staging": planned["staging"],
    }
    for cls, want in laid_out.items():
        assert pairs[cls] == pytest.approx(want, rel=RELATIVE), cls
    # AdamW keeps two fp32 moments per master element
    assert planned["optimizer"] == 2 * planned["master"]


@pytest.mark.parametrize("fake_world", [64], indirect=True)
def test_fsdp2_llama3_8b_on_64_ranks(fake_world: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = build_model("llama3_8b", device="meta")
    mesh = init_device_mesh("cpu", (fake_world,))
    fully_shard(model.tok_embeddings, mesh=mesh)
    fully_shard([model.norm, model.output], mesh=mesh, reshard_after_forward=False)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    shard_bytes = sum(p.to_local().numel() * 4 for p in model.parameters())  # fp32 masters
    planned = _planned("llama3_8b", "fsdp2", fake_world)
    assert planned["master"] == pytest.approx(shard_bytes, rel=RELATIVE)
    assert planned["sharded_grads"] == planned["master"]
