"""Parameter and FLOP counts of the model family, on the meta device."""

from __future__ import annotations

import pytest

from harness.models.llama import build_model, count_params
from harness.models.shapes import MODEL_SHAPES, get_shape

PUBLISHED_PARAMS = {
    "llama2_7b": 6.74e9,
    "llama2_13b": 13.0e9,
    "llama2_70b": 69.0e9,
    "llama3_8b": 8.03e9,
    "llama3_70b": 70.6e9,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_parameter_count_matches_published(name: str) -> None:
    assert get_shape(name).num_params() == pytest.approx(PUBLISHED_PARAMS[name], rel=0.01)


@pytest.mark.parametrize("name", sorted(MODEL_SHAPES))
def test_meta_module_has_the_counted_parameters(name: str) -> None:
    model = build_model(name)  # meta device: no memory, even for 70B
    assert next(model.parameters()).is_meta
    assert count_params(model) == get_shape(name).num_params()


def test_cpu_members_have_benchmark_sizes() -> None:
    assert 1e6 <= get_shape("llama_tiny").num_params() <= 5e6
    assert 50e6 <= get_shape("llama_small").num_params() <= 120e6


def test_flops_per_token_formula() -> None:
    shape = get_shape("llama2_7b")
    n_prime = shape.num_params() - shape.vocab_size * shape.dim  # less the token embedding
    expected = 6 * n_prime + 12 * shape.n_layers * shape.dim * 4096
    assert shape.flops_per_token(4096) == expected
    # Longer sequences cost more attention FLOPs per token.
    assert shape.flops_per_token(8192) > shape.flops_per_token(2048)


def test_unknown_model_lists_choices() -> None:
    with pytest.raises(ValueError, match="llama2_7b"):
        get_shape("gpt5")
