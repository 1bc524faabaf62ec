"""Which parameter lives where: units, the resident unit, flat ragged shards."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from yafsdp_impl import annotation_names as names
from yafsdp_impl._vocab_split import VocabHalf

# Norm weights and parameters outside every unit: gathered and reduced once per step.
RESIDENT = names.RESIDENT


def is_norm(module: nn.Module) -> bool:
    """Norm layers are found by type name: RMSNorm, LayerNorm, GroupNorm, any *Norm* class."""
    return "Norm" in type(module).__name__


@dataclass(slots=True)
class ParamSlot:
    """One parameter's place in its unit's flat vector."""

    name: str  # qualified name in the wrapped module
    module: nn.Module
    attr: str
    shape: torch.Size
    offset: int
    # A vocabulary half (`split_vocab`) holds rows [first_row, first_row + shape[0]) of the
    # parameter `name`, whose whole shape is `whole`; None for a parameter held whole.
    whole: torch.Size | None = None
    first_row: int = 0

    @property
    def numel(self) -> int:
        return self.shape.numel()

    def value_of(self, whole_value: torch.Tensor) -> torch.Tensor:
        """The part of the named parameter's whole value this slot holds."""
        if self.whole is None:
            return whole_value
        return whole_value[self.first_row : self.first_row + self.shape[0]]


def frozen_param(slot: ParamSlot) -> nn.Parameter:
    """A frozen parameter as its module holds it now (the engine never replaces those)."""
    param = slot.module._parameters[slot.attr]
    assert param is not None, f"{slot.name} was removed from its module"
    return param


@dataclass(slots=True)
class UnitLayout:
    """A unit flattened in module order and zero-padded to a multiple of the world size."""

    index: int  # position in execution order; -1 for the resident unit
    name: str
    slots: list[ParamSlot]
    numel: int
    padded_numel: int
    world_size: int
    master_offset: int = 0  # where this rank's shard starts in its flat master tensor

    @property
    def shard_numel(self) -> int:
        return self.padded_numel // self.world_size

    def shard_range(self, rank: int) -> tuple[int, int]:
        return rank * self.shard_numel, (rank + 1) * self.shard_numel


@dataclass(slots=True)
class Layout:
    units: list[UnitLayout]
    resident: UnitLayout
    frozen: list[ParamSlot] = field(default_factory=list)  # stay replicated, untouched

    @property
    def max_padded_numel(self) -> int:
        return max(u.padded_numel for u in self.units)

    @property
    def master_numel(self) -> int:
        return sum(u.shard_numel for u in self.units)

    @property
    def vocab_split(self) -> bool:
        """Whether the ends were split into vocabulary halves (`split_vocab_units`)."""
        return any(s.whole is not None for u in self.units for s in u.slots)


def _padded(numel: int, world_size: int) -> int:
    # At least one element per rank keeps every collective non-empty.
    return max(world_size, -(-numel // world_size) * world_size)


def unit_paths(root: nn.Module, units: list[nn.Module], given: list[str] | None) -> list[str]:
    """Each unit's name: `given` (checked), else its module path in `root` ('layers.3'),
    else (the root itself, a path the range names cannot hold) `unit<N>`."""
    if given is not None:
        if len(given) != len(units) or len(set(given)) != len(given):
            raise ValueError(f"unit_names must name each of the {len(units)} units once: {given}")
        bad = [n for n in given if not names.is_unit_name(n)]
        if bad:
            raise ValueError(f"unit names {bad} are not dotted module paths, or are reserved "
                             f"({', '.join(names.RESERVED)})")  # fmt: skip
        return list(given)
    path = {id(m): n for n, m in root.named_modules()}
    found = [path.get(id(u), "") for u in units]
    return [n if names.is_unit_name(n) else names.unit_name(i) for i, n in enumerate(found)]


def build_layout(
    root: nn.Module, units: list[nn.Module], world_size: int, unit_names: list[str] | None = None
) -> Layout:
    """Assign every trainable parameter to a unit or to the resident unit; refuse ties.
    Units are named `unit_names`, else by their module paths (`unit_paths`)."""
    unit_of: dict[int, int] = {}
    for i, unit in enumerate(units):
        for m in unit.modules():
            if id(m) in unit_of and unit_of[id(m)] != i:
                raise ValueError(
                    f"units {unit_of[id(m)]} and {i} share the submodule {type(m).__name__}; "
                    "units must be disjoint"
                )
            unit_of[id(m)] = i
    module_ids = {id(m) for m in root.modules()}
    for i, unit in enumerate(units):
        if id(unit) not in module_ids:
            raise ValueError(f"unit {i} ({type(unit).__name__}) is not a submodule of the model")

    slots: list[list[ParamSlot]] = [[] for _ in units]
    resident: list[ParamSlot] = []
    frozen: list[ParamSlot] = []
    first_name: dict[int, str] = {}
    for mod_name, module in root.named_modules(remove_duplicate=False):
        for attr, param in module._parameters.items():
            if param is None:
                continue
            name = f"{mod_name}.{attr}" if mod_name else attr
            whole, first_row = None, 0
            if isinstance(module, VocabHalf):  # named as the parameter it holds rows of
                name = f"{mod_name.rpartition('.')[0]}.{attr}".lstrip(".")
                whole, first_row = module.whole[attr], module.first_row
            if id(param) in first_name:
                raise ValueError(
                    f"parameter {name!r} is the same tensor as {first_name[id(param)]!r}: "
                    "YaFSDP shards each unit on its own and cannot hold one weight in two "
                    "places; untie the weights before wrapping"
                )
            first_name[id(param)] = name
            if not param.requires_grad:
                frozen.append(ParamSlot(name, module, attr, param.shape, 0))
                continue
            owner = unit_of.get(id(module))
            target = resident if owner is None or is_norm(module) else slots[owner]
            offset = sum(s.numel for s in target)
            target.append(ParamSlot(name, module, attr, param.shape, offset, whole, first_row))

    layouts = []
    master_offset = 0
    unit_names = unit_paths(root, units, unit_names)
    for i, unit_slots in enumerate(slots):
        numel = sum(s.numel for s in unit_slots)
        padded = _padded(numel, world_size)
        lay = UnitLayout(i, unit_names[i], unit_slots, numel, padded, world_size)
        lay.master_offset = master_offset
        master_offset += lay.shard_numel
        layouts.append(lay)
    numel = sum(s.numel for s in resident)
    res = UnitLayout(-1, RESIDENT, resident, numel, _padded(numel, world_size), world_size)
    return Layout(layouts, res, frozen)


@torch.no_grad()
def copy_into_shard(
    unit: UnitLayout, rank: int, values: Mapping[str, torch.Tensor], shard: torch.Tensor
) -> None:
    """Write this rank's slice of the unit's flat vector into `shard`, padding as zeros.

    Only the overlap of each parameter with the rank's range is touched, so no full-size
    flat copy of the unit is ever made; parameters may straddle rank boundaries.
    """
    start, end = unit.shard_range(rank)
    shard.zero_()
    for s in unit.slots:
        lo, hi = max(start, s.offset), min(end, s.offset + s.numel)
        if lo < hi:
            src = s.value_of(values[s.name]).reshape(-1)[lo - s.offset : hi - s.offset]
            shard[lo - start : hi - start].copy_(src)
