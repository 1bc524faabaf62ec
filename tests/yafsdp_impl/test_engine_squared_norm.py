"""The GPU path's squared-norm arithmetic (`add_squared_norm_fp32`), run on CPU tensors and
held to an fp64 `torch.linalg.vector_norm`: fp32 and bf16, a gradient split into shards as
the reduce-scatters leave it, infinities and NaNs."""

from __future__ import annotations

import math

import pytest
import torch

from yafsdp_impl import _clipping
from yafsdp_impl._clipping import add_squared_norm, add_squared_norm_fp32

N = 10_000


def _grad(dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(N, generator=gen) * 3e-3).to(dtype)


def _reference(grad: torch.Tensor) -> float:
    return torch.linalg.vector_norm(grad.double()).item() ** 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_one_piece_matches_an_fp64_norm(dtype: torch.dtype) -> None:
    grad = _grad(dtype)
    acc = torch.zeros((), dtype=torch.float64)
    add_squared_norm_fp32(acc, grad)
    assert acc.dtype == torch.float64
    # fp32 summation of 1e4 terms: well inside 1e-5; a bf16 norm is 1.3e-3 off here.
    assert acc.item() == pytest.approx(_reference(grad), rel=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("pieces", [1, 3, 8])
def test_shards_sum_to_the_whole(dtype: torch.dtype, pieces: int) -> None:
    """Ragged shards added into one accumulator, as the engine adds each reduce-scatter's
    slice: the total is the squared norm of the whole gradient."""
    grad = _grad(dtype, seed=pieces)
    acc = torch.zeros((), dtype=torch.float64)
    for shard in torch.tensor_split(grad, pieces):
        add_squared_norm_fp32(acc, shard)
    assert acc.item() == pytest.approx(_reference(grad), rel=1e-5)
    cpu = torch.zeros((), dtype=torch.float64)
    for shard in torch.tensor_split(grad, pieces):
        add_squared_norm(cpu, shard)  # the CPU path, fp64 throughout
    assert acc.item() == pytest.approx(cpu.item(), rel=1e-5)


def test_an_empty_shard_adds_nothing() -> None:
    acc = torch.full((), 2.0, dtype=torch.float64)
    add_squared_norm_fp32(acc, torch.zeros(0))
    assert acc.item() == 2.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("bad", "expect"), [(math.inf, math.inf), (math.nan, math.nan),
                                              (-math.inf, math.inf)])  # fmt: skip
def test_non_finite_gradients_give_what_the_reference_gives(
    dtype: torch.dtype, bad: float, expect: float
) -> None:
    grad = _grad(dtype)
    grad[17] = bad
    acc = torch.zeros((), dtype=torch.float64)
    add_squared_norm_fp32(acc, grad[:100])  # the bad value's shard
    add_squared_norm_fp32(acc, grad[100:])
    torch.testing.assert_close(acc, torch.tensor(_reference(grad), dtype=torch.float64),
                               equal_nan=True)  # fmt: skip
    assert math.isnan(acc.item()) if math.isnan(expect) else acc.item() == expect


def test_cuda_tensors_take_the_fp32_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """`add_squared_norm` sends a CUDA gradient to `add_squared_norm_fp32`, CPU ones not."""
    taken: list[torch.Tensor] = []
    monkeypatch.setattr(_clipping, "add_squared_norm_fp32", lambda acc, g: taken.append(g))
    acc = torch.zeros((), dtype=torch.float64)
    add_squared_norm(acc, _grad(torch.float32))
    assert taken == [] and acc.item() > 0
    meta_cuda = torch.empty(4, device="meta")
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda t: t.is_meta))
    add_squared_norm(acc, meta_cuda)
    assert taken == [meta_cuda]
