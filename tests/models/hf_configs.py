"""Tiny Hugging Face configs for the tests, written as config.json files (no network)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DECODER = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}
LLAMA = {"model_type": "llama", **DECODER, "rope_theta": 10000.0}
# Qwen2 differs from Llama where it matters to the engines: q/k/v projections with biases.
QWEN2 = {"model_type": "qwen2", **DECODER, "rope_theta": 1000000.0, "use_sliding_window": False}
TIED_LLAMA = {**LLAMA, "tie_word_embeddings": True}
BERT = {
    "model_type": "bert",
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
}
# A decoder-only causal LM whose layers sit at transformer.h, not model.layers.
GPT2 = {"model_type": "gpt2", "vocab_size": 256, "n_embd": 64, "n_layer": 2, "n_head": 4}


def write_config(root: Path, name: str, config: dict[str, Any]) -> str:
    """Write `config` as <root>/<name>/config.json; return the `model=` value naming it."""
    path = Path(root) / name / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))
    return f"hf:{path}"
