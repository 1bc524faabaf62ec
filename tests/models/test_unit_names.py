"""One unit, one name: the module path (`harness.models.unit_names`), as the harness's models
really call their units, and as older traces' `unit<N>` and FSDP2's groups are shown."""

from __future__ import annotations

import pytest

from harness.engines.base import canonical_module_name
from harness.models.build import build_job_model, decoder_parts
from harness.models.unit_names import (
    job_units,
    layer_index,
    shown,
    shown_by_unit,
    unit_names,
)


@pytest.mark.parametrize("impl", ["native", "hf"])
def test_the_names_are_the_models_own_module_paths(impl: str) -> None:
    model, shape = build_job_model("llama_tiny", impl)
    parts = decoder_parts(model)
    paths = {m: canonical_module_name(n) for n, m in model.named_modules()}
    found = [paths[m] for m in (parts.embed, *parts.layers, parts.head)]
    assert found == unit_names(shape.n_layers, impl)
    assert [layer_index(u) for u in found] == [None, *range(shape.n_layers), None]


@pytest.mark.parametrize(
    "unit, units, expected",
    [
        ("layers.3", None, "layers.3"),
        ("unit3", ["tok_embeddings", "layers.0", "layers.1", "layers.2", "output"], "layers.2"),
        ("unit0", ["tok_embeddings", "layers.0", "output"], "tok_embeddings"),
        ("unit3", None, "unit3"),  # the job's units unknown: as it is
        ("unit9", ["tok_embeddings", "output"], "unit9"),  # not one of them: as it is
        ("norm, output", None, "output"),  # FSDP2's group of the final norm and the output
        ("model.norm, lm_head", None, "lm_head"),
        ("resident", ["tok_embeddings", "output"], "resident"),
        ("clip", None, "clip"),
        ("", None, ""),  # FSDP1's ranges name no unit
    ],
)
def test_shown(unit: str, units: list[str] | None, expected: str) -> None:
    assert shown(unit, units) == expected


def test_shown_by_unit_sums_names_that_meet() -> None:
    by_unit = {"exposed": {"unit1": 1.0, "layers.0": 2.0, "resident": 0.5}}
    assert shown_by_unit(by_unit, ["tok_embeddings", "layers.0"]) == {
        "exposed": {"layers.0": 3.0, "resident": 0.5}
    }


def test_job_units_reads_what_the_engine_recorded() -> None:
    assert job_units({"units": ["tok_embeddings", "layers.0", "output"]}) == [
        "tok_embeddings", "layers.0", "output"
    ]  # fmt: skip
    assert job_units({"groups": [["layers.0"]]}) is None
    assert job_units(None) is None
