"""Published Llama shapes and their parameter/FLOP arithmetic, computed without torch.

`harness.models.shapes.shape_of` also gives the shapes of Hugging Face configs."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelShape:
    name: str
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab_size: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    max_seq_len: int = 8192
    # What a Hugging Face config adds to the Llama arithmetic: parameters per layer beyond
    # the Llama block's (Qwen2's q/k/v biases), and an output projection that is the token
    # embedding (counted once in num_params, still a matmul in the FLOPs).
    extra_layer_params: int = 0
    tied_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def layer_params(self) -> int:
        kv_dim = self.n_kv_heads * self.head_dim
        attention = self.dim * self.dim * 2 + self.dim * kv_dim * 2  # wq, wo, wk, wv
        ffn = 3 * self.dim * self.ffn_dim  # w1, w2, w3
        norms = 2 * self.dim
        return attention + ffn + norms + self.extra_layer_params

    def num_params(self, *, non_embedding: bool = False) -> int:
        """Total parameters; with non_embedding, without the token embedding (torchtitan's N').

        The output projection stays in N': unlike the embedding lookup it is a matmul that
        every token pays for.
        """
        without_embedding = (
            self.n_layers * self.layer_params() + self.dim + self.vocab_size * self.dim
        )
        if non_embedding or self.tied_embeddings:
            return without_embedding
        return without_embedding + self.vocab_size * self.dim  # untied token embedding

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6 N' + 12 L d T (N' = parameters less the token embedding)."""
        return 6.0 * self.num_params(non_embedding=True) + 12.0 * self.n_layers * self.dim * seq_len


def _shape(name: str, **kw: float) -> ModelShape:
    return ModelShape(name=name, **kw)  # type: ignore[arg-type]


MODEL_SHAPES: dict[str, ModelShape] = {
    s.name: s
    for s in [
        _shape(
            "llama2_7b",
            dim=4096,
            n_layers=32,
            n_heads=32,
            n_kv_heads=32,
            ffn_dim=11008,
            vocab_size=32000,
            max_seq_len=8192,
        ),
        _shape(
            "llama2_13b",
            dim=5120,
            n_layers=40,
            n_heads=40,
            n_kv_heads=40,
            ffn_dim=13824,
            vocab_size=32000,
            max_seq_len=8192,
        ),
        _shape(
            "llama2_34b",
            dim=8192,
            n_layers=48,
            n_heads=64,
            n_kv_heads=8,
            ffn_dim=22016,
            vocab_size=32000,
            max_seq_len=8192,
        ),
        _shape(
            "llama2_70b",
            dim=8192,
            n_layers=80,
            n_heads=64,
            n_kv_heads=8,
            ffn_dim=28672,
            vocab_size=32000,
            max_seq_len=8192,
        ),
        _shape(
            "llama3_8b",
            dim=4096,
            n_layers=32,
            n_heads=32,
            n_kv_heads=8,
            ffn_dim=14336,
            vocab_size=128256,
            rope_theta=500000.0,
            max_seq_len=8192,
        ),
        _shape(
            "llama3_70b",
            dim=8192,
            n_layers=80,
            n_heads=64,
            n_kv_heads=8,
            ffn_dim=28672,
            vocab_size=128256,
            rope_theta=500000.0,
            max_seq_len=8192,
        ),
        # CPU-sized members of the same family.
        _shape(
            "llama_tiny",
            dim=128,
            n_layers=4,
            n_heads=4,
            n_kv_heads=2,
            ffn_dim=384,
            vocab_size=2048,
            max_seq_len=1024,
        ),
        _shape(
            "llama_mini",
            dim=256,
            n_layers=4,
            n_heads=4,
            n_kv_heads=2,
            ffn_dim=768,
            vocab_size=8192,
            max_seq_len=2048,
        ),
        _shape(
            "llama_small",
            dim=512,
            n_layers=8,
            n_heads=8,
            n_kv_heads=4,
            ffn_dim=1536,
            vocab_size=32000,
            max_seq_len=2048,
        ),
    ]
}


def get_shape(name: str) -> ModelShape:
    try:
        return MODEL_SHAPES[name]
    except KeyError:
        raise ValueError(
            f"model={name!r} is unknown; choose one of: {', '.join(MODEL_SHAPES)}"
        ) from None


# `model=hf:<path to a config.json>`: a Hugging Face config instead of a preset.
HF_CONFIG_PREFIX = "hf:"


def is_hf_config(model: str) -> bool:
    return str(model).startswith(HF_CONFIG_PREFIX)


def config_path(model: str) -> Path:
    """The config.json that `model=hf:<path>` names (a directory means its config.json)."""
    path = Path(model[len(HF_CONFIG_PREFIX) :]).expanduser()
    return path / "config.json" if path.is_dir() else path


def config_fingerprint(model: str) -> str:
    """The SHA-256 of the config.json an `hf:` model names, so that a job records what the
    file said and not only where it was; "" for a preset or a file that cannot be read
    (the model's validation refuses that one)."""
    if not is_hf_config(model):
        return ""
    try:
        return hashlib.sha256(config_path(model).read_bytes()).hexdigest()
    except OSError:
        return ""
