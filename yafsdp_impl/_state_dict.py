"""Full (keyed by original names) and local (sharded, bitwise) state dicts.

Every function reads or writes the master shards through (layout, buffers, group) alone;
loading does not tell the schedule that the weights changed: the caller does.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from yafsdp_impl import _collectives
from yafsdp_impl._buffers import Buffers
from yafsdp_impl._layout import Layout, UnitLayout, copy_into_shard, frozen_param


@torch.no_grad()
def _gather_named(
    layout: Layout,
    buffers: Buffers,
    group: dist.ProcessGroup,
    units_shard: torch.Tensor,
    resident_shard: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """All-gather each unit's flat vector from per-rank shards and cut it into named tensors."""
    pieces: list[tuple[UnitLayout, torch.Tensor]] = [
        (u, units_shard[buffers.master_shard(u)]) for u in layout.units
    ]
    pieces.append((layout.resident, resident_shard))
    out: dict[str, torch.Tensor] = {}
    for unit, shard in pieces:
        full = torch.empty(unit.padded_numel, dtype=shard.dtype, device=shard.device)
        _collectives.all_gather(full, shard.contiguous(), group, async_op=False)
        for s in unit.slots:
            value = full[s.offset : s.offset + s.numel].view(s.shape).cpu()
            if s.whole is None:
                out[s.name] = value.clone()
            else:  # a vocabulary half: its rows of the whole parameter
                whole = out.setdefault(s.name, value.new_empty(s.whole))
                s.value_of(whole).copy_(value)
    return out


def full_state_dict(
    layout: Layout, buffers: Buffers, group: dist.ProcessGroup
) -> dict[str, torch.Tensor]:
    """fp32 weights keyed by the module's original parameter names, on CPU, on every rank.

    Frozen parameters are reported as held: replicated in the param dtype, cast to fp32.
    """
    out = _gather_named(layout, buffers, group, buffers.master, buffers.resident_master)
    for s in layout.frozen:
        out[s.name] = frozen_param(s).detach().float().cpu().clone()
    return dict(sorted(out.items()))


def full_grad_dict(
    layout: Layout, buffers: Buffers, group: dist.ProcessGroup
) -> dict[str, torch.Tensor]:
    """The reduced fp32 gradients keyed by original names (after the step's last backward)."""
    b = buffers
    return dict(
        sorted(_gather_named(layout, b, group, b.master_grad, b.resident_master_grad).items())
    )


@torch.no_grad()
def load_full_state_dict(
    layout: Layout, buffers: Buffers, group: dist.ProcessGroup, sd: dict[str, torch.Tensor]
) -> None:
    """Load weights keyed by original names: each rank keeps only its shard."""
    rank = dist.get_rank(group)
    for u in layout.units:
        copy_into_shard(u, rank, sd, buffers.master[buffers.master_shard(u)])
    copy_into_shard(layout.resident, rank, sd, buffers.resident_master)
    for s in layout.frozen:
        frozen_param(s).copy_(sd[s.name])


def local_state_dict(layout: Layout, buffers: Buffers, group: dist.ProcessGroup) -> dict[str, Any]:
    """This rank's master shards, exactly as held."""
    return {
        "world_size": dist.get_world_size(group),
        "rank": dist.get_rank(group),
        "master": buffers.master.clone(),
        "resident_master": buffers.resident_master.clone(),
    }


@torch.no_grad()
def load_local_state_dict(
    layout: Layout, buffers: Buffers, group: dist.ProcessGroup, sd: dict[str, Any]
) -> None:
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    if (sd["world_size"], sd["rank"]) != (world_size, rank):
        raise ValueError(
            f"local state dict of rank {sd['rank']}/{sd['world_size']} cannot load into rank "
            f"{rank}/{world_size}; use the full state dict to change world size"
        )
    buffers.master.copy_(sd["master"])
    buffers.resident_master.copy_(sd["resident_master"])


def full_optim_state_dict(
    layout: Layout, buffers: Buffers, group: dist.ProcessGroup, optimizer: torch.optim.Optimizer
) -> dict[str, dict[str, torch.Tensor]]:
    """Per-parameter optimizer state (e.g. AdamW's exp_avg) keyed by original names.

    The optimizer's own `state_dict()` is already the local sharded one: it holds state for
    the engine's flat master parameters only. Scalar state (a step count) is shared.
    """
    *units, resident = buffers.master_params
    states = [optimizer.state.get(p, {}) for p in units]
    res_state = optimizer.state.get(resident, {})
    out: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in res_state.items():
        if isinstance(value, torch.Tensor) and value.shape == resident.shape:
            flat = torch.cat([st[key] for st in states])
            named = _gather_named(layout, buffers, group, flat, value)
        else:
            named = dict.fromkeys(_all_names(layout), value)
        for name, t in named.items():
            out.setdefault(name, {})[key] = t
    return dict(sorted(out.items()))


def _all_names(layout: Layout) -> list[str]:
    """Each parameter's name once (a parameter split by vocabulary has two slots)."""
    return list(dict.fromkeys(s.name for u in [*layout.units, layout.resident] for s in u.slots))
