"""One name per unit, for people: its module path in the model, the name people know from
their own model and the one FSDP2's ranges already use (`tok_embeddings`, `layers.3`,
`output`). The planner's programs and memory moments, yafsdp's ranges (`yafsdp.all_gather.
layers.3`) and the trace tools (`why`, `attribute`) all print a unit so. No torch.

yafsdp's resident unit (norm weights and parameters outside every unit) and `clip` (its
gradient-norm all-reduce) keep their names: they are no module of the model. Traces written
before yafsdp named its ranges by path say `unit<N>` (the N-th unit in execution order);
`shown` turns those into the path where the job's units are known (result.json's
`engine_settings.units`), and leaves them as they are where not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from yafsdp_impl.annotation_names import indexed_unit

# The paths of the token embedding, the decoder layers and the output projection:
# `harness.models.llama.Llama`'s attributes, and a Hugging Face decoder's.
NATIVE = ("tok_embeddings", "layers", "output")
EMBEDDING, LAYERS, OUTPUT = NATIVE
HF = ("model.embed_tokens", "model.layers", "lm_head")
PATHS = {"native": NATIVE, "hf": HF}
# A decoder layer's name, either implementation's ('layers.3', 'model.layers.3').
_LAYER = re.compile(rf"^(?:{'|'.join(re.escape(p[1]) for p in PATHS.values())})\.(\d+)$")


def unit_names(n_layers: int, impl: str = "native") -> list[str]:
    """The units of a decoder of `n_layers` layers in execution order, as the harness wraps
    them in every engine: the embedding, each layer, the output projection."""
    embedding, layers, output = PATHS[impl]
    return [embedding, *(f"{layers}.{i}" for i in range(n_layers)), output]


def layer(i: int, impl: str = "native") -> str:
    """Decoder layer `i`'s name ('layers.3')."""
    return f"{PATHS[impl][1]}.{i}"


def layer_index(unit: str) -> int | None:
    """i of decoder layer i's name ('layers.3' -> 3); None for any other unit."""
    m = _LAYER.match(unit)
    return int(m.group(1)) if m else None


def shown(unit: str, units: Sequence[str] | None = None) -> str:
    """`unit` as people read it: an older yafsdp trace's `unit<N>` as the N-th of `units`
    (the job's units in execution order) where known; a group of several modules that
    FSDP2 names by all of them ('norm, output': the harness shards the final norm with
    the output projection) by its last, the module the other engines name that unit after;
    any other name as it is."""
    index = indexed_unit(unit)
    if index is not None and units is not None and 0 <= index < len(units):
        return units[index]
    if ", " in unit:
        return unit.rsplit(", ", 1)[1]
    return unit


def shown_by_unit(
    by_unit: Mapping[str, Mapping[str, float]], units: Sequence[str] | None = None
) -> dict[str, dict[str, float]]:
    """{cause: {unit: seconds}} with every unit `shown` (names that meet are summed)."""
    out: dict[str, dict[str, float]] = {}
    for cause, per_unit in by_unit.items():
        named: dict[str, float] = {}
        for unit, seconds in per_unit.items():
            key = shown(unit, units)
            named[key] = named.get(key, 0.0) + seconds
        out[cause] = named
    return out


def job_units(engine_settings: Mapping[str, Any] | None) -> list[str] | None:
    """The job's units in execution order as its engine recorded them (result.json's
    `engine_settings.units`, yafsdp's), None where it recorded none."""
    found = (engine_settings or {}).get("units")
    if isinstance(found, list) and all(isinstance(u, str) for u in found):
        return list(found)
    return None
