"""The planner for Hugging Face models: their own activation footprint, and hf:<path>
configs planned from their own shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.plan.cli import main
from harness.plan.memory.activations import activation_footprint

QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 128,
    "intermediate_size": 352,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}


def test_hf_activations_are_measured_on_the_hf_layer() -> None:
    native = activation_footprint("llama_mini", 256, 1, "bf16", "native")
    hf = activation_footprint("llama_mini", 256, 1, "bf16", "hf")
    assert hf.plain.saved > 0 and hf.checkpointed.bwd_peak > 0
    # native keeps fp32 rotary intermediates that HF's bf16 rotary does not: not one probe
    assert hf.plain != native.plain
    # both scale with tokens, and a checkpointed block saves only its input
    assert activation_footprint("llama_mini", 512, 1, "bf16", "hf").plain.saved == pytest.approx(
        2 * hf.plain.saved
    )
    assert hf.checkpointed.saved < hf.plain.saved / 4


def test_an_hf_config_is_planned_from_its_own_shapes(capsys, tmp_path: Path) -> None:
    rows = {}
    for layers in (2, 4):
        path = tmp_path / f"qwen2_{layers}" / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps({**QWEN2, "num_hidden_layers": layers}))
        args = [f"model=hf:{path}", "model_impl=hf", "gpus=2", "seq_len=128", "engine=yafsdp"]
        assert main(["--json", *args, "hardware=cpu"]) == 0
        rows[layers] = json.loads(capsys.readouterr().out)[0]
        assert rows[layers]["model"] == f"hf:{path}" and rows[layers]["peak_memory_bytes"] > 0
    assert rows[4]["memory_bytes_by_class"]["master"] > rows[2]["memory_bytes_by_class"]["master"]


@pytest.mark.parametrize("world_size", [2, 8])
def test_fsdp_units_count_an_hf_models_extra_parameters(tmp_path: Path, world_size: int) -> None:
    """Qwen2's q/k/v biases are in the planner's FSDP units: its per-rank shard equals the
    real model's parameters, each padded on its first dimension as FSDP2 pads them, up to
    the padding of the biases (the planner pads them as one vector)."""
    from harness.models.build import build_job_model, decoder_parts
    from harness.models.shapes import shape_of
    from harness.models.units import fsdp1_units, fsdp2_units

    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN2))
    model, _ = build_job_model(f"hf:{path}", "hf")
    parts = decoder_parts(model)
    modules = [parts.embed, *parts.layers, parts.norm, parts.head]
    params = [p for m in modules for p in m.parameters()]
    assert any(n.endswith("bias") for n, _ in parts.layers[0].named_parameters())

    def padded(p) -> int:
        rows = -(-p.shape[0] // world_size) * world_size
        return rows * (p.numel() // p.shape[0])

    exact = sum(padded(p) for p in params)
    planned = fsdp2_units(shape_of(f"hf:{path}"), world_size).shard * world_size
    biases_per_layer = 3
    assert 0 <= exact - planned <= biases_per_layer * (world_size - 1) * len(parts.layers)
    numel = sum(p.numel() for p in params)
    assert fsdp1_units(shape_of(f"hf:{path}"), world_size).shard * world_size - numel < (
        world_size * (len(parts.layers) + 3)
    )
