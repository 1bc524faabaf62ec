"""Suite C's per-rank arithmetic, checked against the model and the engine on meta."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from harness.gpucheck import footprint
from harness.gpucheck.suite_c import byte_mismatches, expected_bytes, published_points
from harness.models.llama import build_model
from harness.models.shapes import MODEL_SHAPES, get_shape
from yafsdp_impl import YaFSDP, byte_classes


@pytest.mark.parametrize("name", sorted(MODEL_SHAPES))
def test_param_shapes_are_the_models(name):
    model = build_model(name, device="meta")
    real = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert footprint.llama_param_shapes(get_shape(name)) == real


@pytest.mark.parametrize("n, p", [(10, 4), (12, 4), (3, 8), (128256 * 8192, 256)])
def test_local_numel_splits_without_overlap(n, p):
    parts = [footprint.local_numel(n, p, r) for r in range(p)]
    assert sum(parts) == n
    assert max(parts) == footprint.ceil_div(n, p)


def test_fsdp_arithmetic_for_a_short_last_rank():
    # 10 elements on 4 ranks: chunks of 3, the last rank holds 1 element and 2 of padding
    assert footprint.fsdp1_bytes([10], 4, rank=3) == {
        "params": 12,
        "grads": 12,
        "optimizer": 1 * 4 * 2,
    }
    shapes = {"w": (10, 2)}  # rows 3, 3, 3, 1
    assert footprint.fsdp2_bytes(shapes, 4, rank=3) == {"params": 24, "grads": 24, "optimizer": 16}


def test_fsdp1_units_must_cover_the_model_once():
    shapes = {"a": (2,), "b": (3, 2)}
    assert footprint.fsdp1_unit_numels([["a"], ["b"]], shapes) == [2, 6]
    with pytest.raises(ValueError, match="missing \\['b'\\]"):
        footprint.fsdp1_unit_numels([["a"]], shapes)
    with pytest.raises(ValueError, match="repeated or unknown \\['a'\\]"):
        footprint.fsdp1_unit_numels([["a"], ["a", "b"]], shapes)


@pytest.mark.parametrize("p", [8, 64])
@pytest.mark.parametrize("dtype, param_bytes", [(torch.bfloat16, 2), (torch.float32, 4)])
@pytest.mark.parametrize("plan", ["min_bytes", "split_vocab"])
def test_yafsdp_arithmetic_equals_the_engine_on_meta(p, dtype, param_bytes, plan):
    """The engine's memory_report on the meta device (no memory) at P ranks, rank P-1."""
    dist.init_process_group("fake", store=FakeStore(), rank=p - 1, world_size=p)
    try:
        shape = get_shape("llama_small")
        model = build_model(shape, device="meta")
        units = [model.tok_embeddings, *model.layers, model.output]
        engine = YaFSDP(model, units, device="meta", param_dtype=dtype, buffer_plan=plan)
        want = footprint.yafsdp_bytes(shape, p, param_bytes=param_bytes, plan=plan)
        want.pop("optimizer")
        assert byte_classes(engine.memory_report()) == want
    finally:
        dist.destroy_process_group()


def test_byte_mismatches_name_the_class():
    assert byte_mismatches({"params": 4, "grads": 4}, {"params": 4, "grads": 4}) == ""
    assert byte_mismatches({"params": 4}, {"params": 8}) == "params: 4 B, arithmetic 8 B"
    assert "grads: None B" in byte_mismatches({"params": 4}, {"params": 4, "grads": 1})


def test_unknown_engine_has_no_arithmetic():
    with pytest.raises(ValueError, match="engine 'local' has no per-rank arithmetic"):
        expected_bytes("local", get_shape("llama_tiny"), 2, 1, param_bytes=2)
    with pytest.raises(ValueError, match="fsdp1 needs fsdp1_units"):
        expected_bytes("fsdp1", get_shape("llama_tiny"), 2, 1, param_bytes=2)


def test_published_points_are_the_sixteen_of_the_experiment():
    points, engines = published_points()
    assert len(points) == 16 and engines == ["yafsdp", "fsdp1", "fsdp2"]
    assert {p.gpus for p in points} == {64, 128, 256}
    big = [p for p in points if p.model == "llama2_70b"]
    assert {(p.seq_len, p.ckpt_layers) for p in big} == {(2048, 10), (4096, 50)}


def test_published_points_fit_a_shard_arithmetic():
    """Every published shape divides evenly at its world size, so the last rank is full."""
    for point in published_points()[0]:
        shapes = footprint.llama_param_shapes(get_shape(point.model))
        r = point.gpus - 1
        fsdp2 = footprint.fsdp2_bytes(shapes, point.gpus, r)
        assert fsdp2["optimizer"] == 2 * fsdp2["params"], point.name
