"""A small Llama for the engine's tests, with nothing from the harness.

Token embedding; blocks of RMSNorm + grouped-query causal attention and RMSNorm + SwiGLU
MLP, each added to the residual stream; a final RMSNorm and the output projection (no
rotary embedding: the engine cares about parameters and units, not positions). Every
parameter is drawn from a generator seeded by its name, so a shard or a meta-device model
gets exactly the values of the whole model. `SHAPES` holds the CPU-sized `tiny` and two
published shapes, which the layout tests build on the meta device only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

INIT_STD = 0.02


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab_size: int

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def layer_params(self) -> int:
        kv_dim = self.n_kv_heads * self.head_dim
        attention = 2 * self.dim * self.dim + 2 * self.dim * kv_dim  # wq, wo; wk, wv
        return attention + 3 * self.dim * self.ffn_dim + 2 * self.dim  # w1-w3; two norms

    def num_params(self) -> int:
        embedding_and_output = 2 * self.vocab_size * self.dim
        return self.n_layers * self.layer_params() + self.dim + embedding_and_output


SHAPES = {
    # An embedding and an output larger than a layer, as in every real Llama.
    "tiny": Shape(dim=128, n_layers=4, n_heads=4, n_kv_heads=2, ffn_dim=384, vocab_size=2048),
    "llama2_70b": Shape(
        dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, ffn_dim=28672, vocab_size=32000
    ),
    "llama3_8b": Shape(
        dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim=14336, vocab_size=128256
    ),
    "llama3_70b": Shape(
        dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, ffn_dim=28672, vocab_size=128256
    ),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = s.n_heads, s.n_kv_heads, s.head_dim
        self.wq = nn.Linear(s.dim, s.n_heads * s.head_dim, bias=False)
        self.wk = nn.Linear(s.dim, s.n_kv_heads * s.head_dim, bias=False)
        self.wv = nn.Linear(s.dim, s.n_kv_heads * s.head_dim, bias=False)
        self.wo = nn.Linear(s.n_heads * s.head_dim, s.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k, v = (f(x).view(b, t, self.n_kv_heads, self.head_dim) for f in (self.wk, self.wv))
        # Grouped-query attention: each key/value head serves n_heads / n_kv_heads queries.
        k, v = (z.repeat_interleave(self.n_heads // self.n_kv_heads, 2).transpose(1, 2)
                for z in (k, v))  # fmt: skip
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(s.dim)
        self.attention = Attention(s)
        self.ffn_norm = RMSNorm(s.dim)
        self.feed_forward = FeedForward(s.dim, s.ffn_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.shape = shape
        self.tok_embeddings = nn.Embedding(shape.vocab_size, shape.dim)
        self.layers = nn.ModuleList(Block(shape) for _ in range(shape.n_layers))
        self.norm = RMSNorm(shape.dim)
        self.output = nn.Linear(shape.dim, shape.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def build_llama(shape: str, *, device: str = "meta", seed: int | None = None) -> Llama:
    """The model of `SHAPES[shape]` on `device`; with a seed, every parameter initialised by
    name (`initial_value`)."""
    with torch.device(device):
        model = Llama(SHAPES[shape])
    if seed is not None:
        with torch.no_grad():
            for name, param in model.named_parameters():
                param.copy_(initial_value(name, param.shape, seed))
    return model


def initial_value(name: str, shape: torch.Size | tuple[int, ...], seed: int) -> torch.Tensor:
    """Parameter `name`'s fp32 initial value: norm weights 1, all else N(0, INIT_STD) from a
    generator seeded by (seed, name)."""
    if name.endswith("norm.weight"):
        return torch.ones(shape)
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
    return torch.randn(shape, generator=gen) * INIT_STD
