"""Full (keyed by original names) and local (sharded, bitwise) state dicts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from yafsdp_impl import collectives
from yafsdp_impl.layout import UnitLayout, copy_into_shard

if TYPE_CHECKING:
    from yafsdp_impl.api import YaFSDP


@torch.no_grad()
def _gather_named(
    engine: YaFSDP, units_shard: torch.Tensor, resident_shard: torch.Tensor
) -> dict[str, torch.Tensor]:
    """All-gather each unit's flat vector from per-rank shards and cut it into named tensors."""
    b = engine.buffers
    pieces: list[tuple[UnitLayout, torch.Tensor]] = [
        (u, units_shard[b.master_shard(u)]) for u in engine.layout.units
    ]
    pieces.append((engine.layout.resident, resident_shard))
    out: dict[str, torch.Tensor] = {}
    for unit, shard in pieces:
        full = torch.empty(unit.padded_numel, dtype=shard.dtype, device=shard.device)
        collectives.all_gather(full, shard.contiguous(), engine.group, async_op=False)
        for s in unit.slots:
            out[s.name] = full[s.offset : s.offset + s.numel].view(s.shape).cpu().clone()
    return out


def full_state_dict(engine: YaFSDP) -> dict[str, torch.Tensor]:
    """fp32 weights keyed by the module's original parameter names, on CPU, on every rank.

    Frozen parameters are reported as held: replicated in the param dtype, cast to fp32.
    """
    b = engine.buffers
    out = _gather_named(engine, b.master, b.resident_master)
    for s in engine.layout.frozen:
        out[s.name] = s.module._parameters[s.attr].detach().float().cpu().clone()
    return dict(sorted(out.items()))


def full_grad_dict(engine: YaFSDP) -> dict[str, torch.Tensor]:
    """The reduced fp32 gradients keyed by original names (after the step's last backward)."""
    b = engine.buffers
    return dict(sorted(_gather_named(engine, b.master_grad, b.resident_master_grad).items()))


@torch.no_grad()
def load_full_state_dict(engine: YaFSDP, sd: dict[str, torch.Tensor]) -> None:
    """Load weights keyed by original names: each rank keeps only its shard."""
    b = engine.buffers
    for u in engine.layout.units:
        copy_into_shard(u, engine.rank, sd, b.master[b.master_shard(u)])
    copy_into_shard(engine.layout.resident, engine.rank, sd, b.resident_master)
    for s in engine.layout.frozen:
        s.module._parameters[s.attr].copy_(sd[s.name])
    engine._step_open = False  # the next forward re-gathers from the new master


def local_state_dict(engine: YaFSDP) -> dict[str, Any]:
    """This rank's master shards, exactly as held."""
    b = engine.buffers
    return {
        "world_size": engine.world_size,
        "rank": engine.rank,
        "master": b.master.clone(),
        "resident_master": b.resident_master.clone(),
    }


@torch.no_grad()
def load_local_state_dict(engine: YaFSDP, sd: dict[str, Any]) -> None:
    if (sd["world_size"], sd["rank"]) != (engine.world_size, engine.rank):
        raise ValueError(
            f"local state dict of rank {sd['rank']}/{sd['world_size']} cannot load into rank "
            f"{engine.rank}/{engine.world_size}; use the full state dict to change world size"
        )
    engine.buffers.master.copy_(sd["master"])
    engine.buffers.resident_master.copy_(sd["resident_master"])
    engine._step_open = False


def full_optim_state_dict(
    engine: YaFSDP, optimizer: torch.optim.Optimizer
) -> dict[str, dict[str, torch.Tensor]]:
    """Per-parameter optimizer state (e.g. AdamW's exp_avg) keyed by original names.

    The optimizer's own `state_dict()` is already the local sharded one: it holds state for
    the engine's flat master parameters only. Scalar state (a step count) is shared.
    """
    *units, resident = engine.parameters()
    states = [optimizer.state.get(p, {}) for p in units]
    res_state = optimizer.state.get(resident, {})
    out: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in res_state.items():
        if isinstance(value, torch.Tensor) and value.shape == resident.shape:
            flat = torch.cat([st[key] for st in states])
            named = _gather_named(engine, flat, value)
        else:
            named = dict.fromkeys(_all_names(engine), value)
        for name, t in named.items():
            out.setdefault(name, {})[key] = t
    return dict(sorted(out.items()))


def _all_names(engine: YaFSDP) -> list[str]:
    units = [*engine.layout.units, engine.layout.resident]
    return [s.name for u in units for s in u.slots]
