"""Llama 2/3 in about a hundred lines: RMSNorm, RoPE, grouped-query attention, SwiGLU."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from harness.models.shapes import ModelShape, get_shape


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 for stability, as the reference implementation does.
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_tables(head_dim: int, seq_len: int, theta: float, device: torch.device) -> torch.Tensor:
    """cos/sin tables of shape (seq_len, head_dim // 2, 2), computed in fp32."""
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device).float(), freqs)
    return torch.stack([angles.cos(), angles.sin()], dim=-1)


def apply_rope(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Rotate pairs of channels of x (batch, seq, heads, head_dim) by the position angles."""
    pairs = x.float().unflatten(-1, (-1, 2))
    cos, sin = table[..., 0][None, :, None, :], table[..., 1][None, :, None, :]
    real = pairs[..., 0] * cos - pairs[..., 1] * sin
    imag = pairs[..., 0] * sin + pairs[..., 1] * cos
    return torch.stack([real, imag], dim=-1).flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = (
            shape.n_heads,
            shape.n_kv_heads,
            shape.head_dim,
        )
        self.wq = nn.Linear(shape.dim, shape.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(shape.dim, shape.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(shape.dim, shape.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(shape.n_heads * self.head_dim, shape.dim, bias=False)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, self.n_heads, self.head_dim)
        k = self.wk(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        q, k = apply_rope(q, rope), apply_rope(k, rope)
        # Grouped-query attention: each key/value head serves n_heads / n_kv_heads query heads.
        repeats = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(repeats, dim=2)
        v = v.repeat_interleave(repeats, dim=2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(shape.dim, shape.norm_eps)
        self.attention = Attention(shape)
        self.ffn_norm = RMSNorm(shape.dim, shape.norm_eps)
        self.feed_forward = FeedForward(shape.dim, shape.ffn_dim)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), rope)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.shape = shape
        self.tok_embeddings = nn.Embedding(shape.vocab_size, shape.dim)
        self.layers = nn.ModuleList(TransformerBlock(shape) for _ in range(shape.n_layers))
        self.norm = RMSNorm(shape.dim, shape.norm_eps)
        self.output = nn.Linear(shape.dim, shape.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # RoPE tables are recomputed per call: cheap, and no buffer to shard or materialise.
        rope = rope_tables(
            self.shape.head_dim, tokens.shape[1], self.shape.rope_theta, tokens.device
        )
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, rope)
        return self.output(self.norm(h))


def build_model(model: str | ModelShape, *, device: str | torch.device = "meta") -> Llama:
    """Build the model on `device` (meta by default: no memory until an engine materialises it)."""
    shape = get_shape(model) if isinstance(model, str) else model
    with torch.device(device):
        return Llama(shape)


def count_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
