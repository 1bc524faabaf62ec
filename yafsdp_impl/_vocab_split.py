"""The `split_vocab` plan's units: the token embedding and the output projection each cut
into two vocabulary halves, each half a unit of its own, so that ends larger than a layer
(Llama 3's 128k vocabulary: 1.23 layers each) no longer size the buffers.

The embedding keeps its place and name in the model; its weight moves to two children
(`vocab_lo`, `vocab_hi`), each holding a block of rows (the low half one more row when the
vocabulary is odd). Its forward looks every token up in both halves (two lookups) and keeps,
per token, the half that holds its row. The output projection makes two GEMMs of half width
and concatenates them along the vocabulary. The high half takes the low half's output as an
input, so autograd can only run the high half's backward first: units run backward in the
reverse of their forward order, as the schedule requires. The layout records which rows of
which original parameter each half holds (`build_layout`), so state dicts keep the
original names and shapes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

LOW, HIGH = "vocab_lo", "vocab_hi"


class VocabHalf(nn.Module):
    """Rows [first_row, first_row + rows) of its parent's vocabulary-sized parameters.
    `whole` names each parameter it holds rows of, with the shape of the whole one."""

    def __init__(self, first_row: int, rows: int, whole: dict[str, torch.Size]) -> None:
        super().__init__()
        self.first_row, self.rows, self.whole = first_row, rows, whole
        for attr, shape in whole.items():  # placeholders: the engine binds buffer views
            half = torch.empty((rows, *shape[1:]), device="meta")
            self.register_parameter(attr, nn.Parameter(half))


class EmbeddingHalf(VocabHalf):
    def __init__(self, first_row: int, rows: int, whole: dict[str, torch.Size],
                 padding_idx: int | None) -> None:  # fmt: skip
        super().__init__(first_row, rows, whole)
        local = None if padding_idx is None else padding_idx - first_row
        self.padding_idx = local if local is not None and 0 <= local < rows else None

    def forward(self, ids: torch.Tensor, below: torch.Tensor | None = None) -> torch.Tensor:
        # Tokens outside this half look up a clamped row; `where` (or the next half) drops
        # them, so their rows get exactly zero gradient.
        local = ids - self.first_row
        weight = cast(torch.Tensor, self.weight)  # a view the engine binds, maybe no Parameter
        rows = F.embedding(local.clamp(0, self.rows - 1), weight, self.padding_idx)
        if below is None:
            return rows
        return torch.where((local >= 0).unsqueeze(-1), rows, below)


class LinearHalf(VocabHalf):
    def forward(self, x: torch.Tensor, below: torch.Tensor | None = None) -> torch.Tensor:
        bias = cast(torch.Tensor | None, getattr(self, "bias", None))
        out = F.linear(x, cast(torch.Tensor, self.weight), bias)
        return out if below is None else torch.cat([below, out], dim=-1)


def _two_halves(low: VocabHalf, high: VocabHalf, x: torch.Tensor) -> torch.Tensor:
    return high(x, low(x))


def _only_module(unit: nn.Module, kind: type[nn.Module], where: str) -> nn.Module:
    """The unit's one module of `kind` holding all of the unit's parameters."""
    found = [m for m in unit.modules() if type(m) is kind]
    held = {id(p) for p in unit.parameters()}
    if len(found) != 1 or held != {id(p) for p in found[0].parameters()}:
        raise ValueError(
            f"buffer_plan='split_vocab' splits the {where} unit by vocabulary: it must be (or "
            f"hold, with no other parameter) one nn.{kind.__name__}; got "
            f"{type(unit).__name__}. Choose another buffer_plan for this model"
        )
    return found[0]


def _split_embedding(emb: nn.Embedding) -> tuple[VocabHalf, VocabHalf]:
    if emb.max_norm is not None or emb.scale_grad_by_freq or emb.sparse:
        raise ValueError(
            "buffer_plan='split_vocab' splits the embedding's rows; max_norm, "
            "scale_grad_by_freq and sparse gradients are not supported there"
        )
    return _halves(emb, emb.num_embeddings, lambda first, rows, whole: EmbeddingHalf(
        first, rows, whole, emb.padding_idx))  # fmt: skip


def _halves(module: nn.Module, vocab: int, make) -> tuple[VocabHalf, VocabHalf]:  # noqa: ANN001
    """Move `module`'s parameters into two halves, made by make(first_row, rows, whole)."""
    if vocab < 2:
        raise ValueError(f"buffer_plan='split_vocab' needs a vocabulary of 2 or more, got {vocab}")
    whole = {attr: p.shape for attr, p in module._parameters.items() if p is not None}
    if any(not p.requires_grad for p in module.parameters(recurse=False)):
        raise ValueError("buffer_plan='split_vocab' cannot split a frozen embedding or output")
    low_rows = -(-vocab // 2)  # odd vocabularies: the low half holds the extra row
    low, high = make(0, low_rows, whole), make(low_rows, vocab - low_rows, whole)
    for attr in whole:
        del module._parameters[attr]
    module.add_module(LOW, low)
    module.add_module(HIGH, high)
    module.forward = functools.partial(_two_halves, low, high)
    return low, high


def split_unit_names(names: Sequence[str]) -> list[str]:
    """The units' names after `split_vocab_units`: each end's two halves are named by their
    module paths under it ('tok_embeddings.vocab_lo', 'tok_embeddings.vocab_hi')."""
    first, *middle, last = names
    return [f"{first}.{LOW}", f"{first}.{HIGH}", *middle, f"{last}.{LOW}", f"{last}.{HIGH}"]


def split_vocab_units(units: Sequence[nn.Module]) -> list[nn.Module]:
    """Split the first unit (an nn.Embedding) and the last (an nn.Linear whose outputs are
    the vocabulary) into vocabulary halves, in place; return the units with each end
    replaced by its two halves. Refuses, naming why, a model it cannot split."""
    if len(units) < 3:
        raise ValueError("buffer_plan='split_vocab' needs at least three units")
    emb = _only_module(units[0], nn.Embedding, "first")
    out = _only_module(units[-1], nn.Linear, "last")
    assert isinstance(emb, nn.Embedding) and isinstance(out, nn.Linear)
    if out.out_features != emb.num_embeddings:
        raise ValueError(
            f"buffer_plan='split_vocab': the last unit's nn.Linear has {out.out_features} "
            f"outputs, not the embedding's vocabulary of {emb.num_embeddings}"
        )
    if out.weight is emb.weight:
        raise ValueError(
            "the embedding and the output projection share one weight: YaFSDP shards each "
            "unit on its own and cannot hold one weight in two places; untie the weights "
            "before wrapping"
        )
    emb_halves = _split_embedding(emb)
    out_halves = _halves(out, out.out_features, LinearHalf)
    return [*emb_halves, *units[1:-1], *out_halves]
