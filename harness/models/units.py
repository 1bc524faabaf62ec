"""How each engine groups the model's parameters into units, in elements, from the shape.

The groupings follow the adapters (`harness/engines/`): fsdp1 flattens the embedding, each
block and the output projection into one flat parameter each (the root keeps the final
norm), padded as a whole to a multiple of the world size; fsdp2 shards each parameter on
its first dimension (padded to a multiple of the world size) in groups of the embedding,
each block and [final norm, output]. yafsdp's own layout is read from `yafsdp_impl`.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.models.shapes import ModelShape


def _ceil_to(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def block_param_shapes(shape: ModelShape) -> list[tuple[int, ...]]:
    """The parameter shapes of one block, as `harness.models.llama.TransformerBlock` holds them;
    a Hugging Face config's extra per-layer parameters (Qwen2's q/k/v biases) as one more
    vector (padded once instead of per bias: off by under `world_size` elements each)."""
    d, f, kv = shape.dim, shape.ffn_dim, shape.n_kv_heads * shape.head_dim
    shapes = [(d,), (d, d), (kv, d), (kv, d), (d, d), (d,), (f, d), (d, f), (f, d)]
    return shapes + ([(shape.extra_layer_params,)] if shape.extra_layer_params else [])


@dataclass(frozen=True, slots=True)
class Units:
    """Unsharded elements of each unit in execution order (embedding, blocks, output) and
    the elements each rank holds of all of them (its shard), both padded as the engine pads."""

    embedding: int
    block: int
    output: int
    n_blocks: int
    shard: int  # elements per rank, all units together

    @property
    def largest(self) -> int:
        return max(self.embedding, self.block, self.output)


def fsdp1_units(shape: ModelShape, world_size: int) -> Units:
    def flat(n: int) -> int:  # use_orig_params=False: no per-parameter alignment
        return _ceil_to(n, world_size)

    v, d = shape.vocab_size, shape.dim
    sizes = [flat(v * d), *[flat(shape.layer_params())] * shape.n_layers, flat(v * d), flat(d)]
    return Units(
        embedding=sizes[0],
        block=sizes[1],
        output=sizes[-2],
        n_blocks=shape.n_layers,
        shard=sum(sizes) // world_size,
    )


def fsdp2_units(shape: ModelShape, world_size: int) -> Units:
    def padded(dims: tuple[int, ...]) -> int:
        rest = 1
        for n in dims[1:]:
            rest *= n
        return _ceil_to(dims[0], world_size) * rest

    v, d = shape.vocab_size, shape.dim
    embedding = padded((v, d))
    block = sum(padded(s) for s in block_param_shapes(shape))
    head = padded((d,)) + padded((v, d))
    total = embedding + shape.n_layers * block + head
    return Units(
        embedding=embedding,
        block=block,
        output=head,
        n_blocks=shape.n_layers,
        shard=total // world_size,
    )
