"""The two model families the engine tests run on (a GPT-2-style one here, a small Llama in
`llama.py`), and their training step."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tests.yafsdp_impl.llama import Llama, build_llama

VOCAB_GPT = 96
SEQ = 16
BATCH = 4


class GPTBlock(nn.Module):
    """Pre-LN GPT-2 block with biases; takes its input by keyword only."""

    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln_1 = nn.LayerNorm(dim)
        # No key bias: its gradient is exactly zero in exact arithmetic (softmax ignores a
        # per-query shift), so AdamW would turn pure rounding noise into lr-sized steps.
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.fc_out = nn.Linear(4 * dim, dim)
        self.unused = nn.Linear(dim, 7)  # never called: its reduced gradient must be exactly 0

    def forward(self, *, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.ln_1(x)
        q, k, v = (f(h).view(b, t, self.n_heads, -1) for f in (self.q, self.k, self.v))
        att = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.fc_out(F.gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, n_layers: int = 3, dim: int = 64, n_heads: int = 4) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB_GPT, dim)
        self.wpe = nn.Parameter(torch.randn(SEQ, dim) * 0.02)  # outside every unit: resident
        self.blocks = nn.ModuleList(GPTBlock(dim, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB_GPT)
        self.logit_scale = nn.Parameter(torch.tensor(0.5), requires_grad=False)  # frozen

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.wte(tokens) + self.wpe[: tokens.shape[1]]
        for block in self.blocks:
            h = block(x=h)
        return self.head(self.ln_f(h)) * self.logit_scale


def build(name: str, seed: int = 0, n_layers: int = 3) -> nn.Module:
    if name == "gpt":
        torch.manual_seed(seed)
        return GPT(n_layers)
    if name == "llama":
        return build_llama("tiny", device="cpu", seed=seed)
    raise ValueError(f"model {name!r} is unknown; choose gpt or llama")


def units_of(model: nn.Module) -> list[nn.Module]:
    if isinstance(model, GPT):
        return [model.wte, *model.blocks, model.head]
    assert isinstance(model, Llama)
    return [model.tok_embeddings, *model.layers, model.output]


def vocab_of(model: nn.Module) -> int:
    if isinstance(model, GPT):
        return VOCAB_GPT
    assert isinstance(model, Llama)
    return model.shape.vocab_size


def batch(vocab: int, step: int, rank: int, size: int = BATCH) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randint(0, vocab, (size, SEQ + 1), generator=gen)


def loss_of(model, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
