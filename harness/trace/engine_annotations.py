"""The annotation grammars of the engines: which profiler ranges name a unit.

Each grammar maps a range's name to (kind, unit), or None when the name is not one of the
engine's unit ranges; GRAMMARS gives each registered engine label its own. yafsdp's
grammar is the engine's (`yafsdp_impl.annotation_names.parse`). No torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from yafsdp_impl.annotation_names import parse as yafsdp

# FSDP2 names its ranges after the module they act on: 'FSDP::all_gather (layers.3)'.
_FSDP2 = re.compile(r"^FSDP::(?P<kind>[a-z_]+)\s*\((?P<unit>[^)]*)\)$")
# The deepspeed adapter names its ranges as FSDP2 does: 'DeepSpeed::fetch (layers.3)',
# 'DeepSpeed::release (layers.3)', 'DeepSpeed::reduce (layers.1..tok_embeddings)'.
_DEEPSPEED = re.compile(r"^DeepSpeed::(?P<kind>fetch|release|reduce)\s*\((?P<unit>[^)]*)\)$")
# Upstream YaFSDP names its ranges as FSDP2 does, under its own prefix:
# 'YaFSDP::all_gather (layers.3)'.
_YA_FSDP = re.compile(r"^YaFSDP::(?P<kind>[a-z_]+)\s*\((?P<unit>[^)]*)\)$")
# FSDP1 names its ranges after the wrapper alone: 'FullyShardedDataParallel.forward'.
_FSDP1 = re.compile(r"^FullyShardedDataParallel\.(?P<kind>[A-Za-z_]+)$")


def fsdp1(name: str) -> tuple[str, str] | None:
    """(kind, '') of an FSDP1 range: FSDP1's names carry no unit. Nor is one numbered by
    order here: the root's `FullyShardedDataParallel.forward` holds every unit's, and a
    unit's range issues the next unit's prefetched gather, so the n-th range is not
    reliably the n-th unit (`unit_names` would put a wrong module path on it)."""
    m = _FSDP1.match(name)
    return (m.group("kind"), "") if m else None


def fsdp2(name: str) -> tuple[str, str] | None:
    """(kind, module name) of an FSDP2 range."""
    m = _FSDP2.match(name)
    return (m.group("kind"), m.group("unit")) if m else None


def deepspeed(name: str) -> tuple[str, str] | None:
    """(kind, unit) of a range the deepspeed adapter adds (`harness.engines.deepspeed_ranges`)."""
    m = _DEEPSPEED.match(name)
    return (m.group("kind"), m.group("unit")) if m else None


def ya_fsdp(name: str) -> tuple[str, str] | None:
    """(kind, module name) of an upstream YaFSDP range."""
    m = _YA_FSDP.match(name)
    return (m.group("kind"), m.group("unit")) if m else None


def unannotated(name: str) -> tuple[str, str] | None:
    """The grammar of an engine that marks no unit (the unsharded reference)."""
    return None


# Each registered engine label's grammar (tests/engines/test_engine_registry.py holds that
# every label has one).
GRAMMARS: dict[str, Callable[[str], tuple[str, str] | None]] = {
    "yafsdp": yafsdp,
    "fsdp1": fsdp1,
    "fsdp2": fsdp2,
    "fsdp2_tuned": fsdp2,
    "fsdp2_compile": fsdp2,
    "yafsdp_compile": yafsdp,
    "deepspeed": deepspeed,
    "ya_fsdp": ya_fsdp,
    "local": unannotated,
}
