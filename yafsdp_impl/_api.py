"""`YaFSDP`: wrap a module whose units run in a known order, shard it, and train it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint

from yafsdp_impl import _collectives, _state_dict
from yafsdp_impl._buffers import Buffers, bind_views
from yafsdp_impl._hooks import hook_schedule
from yafsdp_impl._layout import build_layout, copy_into_shard, frozen_param
from yafsdp_impl._plan import BufferPlan, PlanChoice, plan_buffers, splits_vocab
from yafsdp_impl._schedule import Schedule
from yafsdp_impl._vocab_split import split_unit_names, split_vocab_units
from yafsdp_impl.annotation_names import COLLECTIVES


def byte_classes(report: Mapping[str, Any]) -> dict[str, int]:
    """A `memory_report`'s byte classes, its plan entry aside."""
    return {k: v for k, v in report.items() if isinstance(v, int)}


def held_bytes(report: Mapping[str, Any]) -> int:
    """The bytes of a `memory_report`, every class summed (its plan entry aside)."""
    return sum(byte_classes(report).values())


class YaFSDP:
    """Shard `module` unit by unit; call it like the module, optimise `parameters()`.

    Args:
        module: the model, materialised (or on meta with device="meta" for layout only).
        units: submodules in execution order (e.g. embedding, each layer, output).
        param_dtype: dtype of the unsharded weights and of autograd's gradients.
        reduce_dtype: dtype of the gradient reduce-scatter (fp32 default, or bf16).
        process_group: defaults to the world.
        grad_accum_steps: backward passes per optimizer step.
        ckpt_units: activation checkpointing: the first N units, or the given unit modules.
        device: where the engine's buffers live (default: the module's device, or CUDA).
        init_fn: for a module built on the meta device, init_fn(name, shape) returns the
            full initial value of parameter `name`. It is called one parameter at a time and
            only for parameters that overlap this rank's shards, so the full model is never
            materialised.
        buffer_plan: "auto" (default): with a memory budget, "separate_ends" where the
            engine's memory with it fits the budget, else "min_bytes" where it fits, else
            "half_staging"; without one, "min_bytes". Or a plan by name: "min_bytes" (the
            plan of the next three that holds the fewest bytes), "alternating" (two buffers
            sized to the largest unit), "lean_alternating" (the same with a layer-sized
            staging: larger ends reduce-scatter in chunks), "ends_shared" (the first and
            last units share one buffer, the others alternate two layer-sized ones),
            "separate_ends" (the first and last units keep a buffer each, so the first stays
            gathered from its forward to its backward), "half_staging" ("min_bytes" with a
            staging of half a layer: one more reduce-scatter per layer), "split_vocab" (the
            first unit, an nn.Embedding, and the last, an nn.Linear onto the vocabulary, each
            split in place into two units of half the vocabulary, the buffers alternating
            as in "alternating": sized by the largest of a layer and half an end; more
            collectives, see `_plan`; state dicts keep the original names and shapes);
            see `plan_buffers`.
        memory_budget_bytes: the most memory the engine's own tensors may take (its
            buffers, staging, master shards and their gradients: `memory_report`'s
            classes but the optimizer's), for `buffer_plan="auto"`.
        unit_names: what the profiler ranges call each unit (`yafsdp.all_gather.layers.3`);
            default: its module path in `module`, as FSDP2 names its ranges.
    """

    def __init__(
        self,
        module: nn.Module,
        units: Sequence[nn.Module],
        *,
        param_dtype: torch.dtype = torch.bfloat16,
        reduce_dtype: torch.dtype = torch.float32,
        process_group: dist.ProcessGroup | None = None,
        grad_accum_steps: int = 1,
        ckpt_units: int | Sequence[nn.Module] = 0,
        device: torch.device | str | None = None,
        init_fn: Callable[[str, torch.Size], torch.Tensor] | None = None,
        buffer_plan: str = "auto",
        memory_budget_bytes: int | None = None,
        unit_names: Sequence[str] | None = None,
    ) -> None:
        units = list(units)
        _check_arguments(units, grad_accum_steps)
        self.module = module
        self.group = process_group or dist.distributed_c10d._get_default_group()
        self.rank = dist.get_rank(self.group)
        self.world_size = dist.get_world_size(self.group)
        self.param_dtype = param_dtype
        self.reduce_dtype = reduce_dtype
        self.grad_accum_steps = grad_accum_steps
        self.device = torch.device(device) if device is not None else _default_device(module)
        comm = _collectives.Comm(self.group)
        # Read before a vocabulary split moves the ends' weights into halves.
        values = _initial_values(module, init_fn, self.device)
        ckpt = _checkpointed_units(units, ckpt_units)
        given = list(unit_names) if unit_names is not None else None
        if splits_vocab(buffer_plan):
            units, ckpt = _split_ends(units, ckpt)
            given = split_unit_names(given) if given is not None else None

        # Which parameter lives where, and the buffers that hold the unsharded units.
        self.layout = build_layout(module, units, self.world_size, given)
        self.plan_choice: PlanChoice = plan_buffers(
            self.layout, buffer_plan, memory_budget_bytes,
            param_bytes=param_dtype.itemsize, reduce_bytes=reduce_dtype.itemsize,
            native_reduce_scatter=comm.native_reduce_scatter,
        )  # fmt: skip
        self.buffer_plan: BufferPlan = self.plan_choice.plan
        self.buffers = Buffers(
            self.layout,
            self.buffer_plan,
            device=self.device,
            param_dtype=param_dtype,
            reduce_dtype=reduce_dtype,
            native_reduce_scatter=comm.native_reduce_scatter,
        )

        # The module's values move into the shards; its parameters become buffer views.
        grad_views = self._move_into_buffers(values, init_fn)
        for m in ckpt:
            m.forward = functools.partial(_checkpointed, m.forward)

        # The schedule, driven by hooks on the module, its units and their weights.
        self.schedule = Schedule(
            self.layout, self.buffers, comm,
            grad_accum_steps=grad_accum_steps, grad_views=grad_views,
        )  # fmt: skip
        hook_schedule(self.schedule, module, units, grad_views)

    # ---- public API -------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def parameters(self) -> list[nn.Parameter]:
        """The fp32 master shards, one flat parameter per unit: what the optimizer updates."""
        return list(self.buffers.master_params)

    def prefetch_after(self, optimizer: torch.optim.Optimizer) -> None:
        """Start each next step as soon as `optimizer.step()` has written the master weights:
        the param-dtype copy, then the resident unit's and the first two units' gathers, so
        they overlap whatever runs before the next forward (the optimizer's zero_grad, data
        loading, logging). Without it they start at the next forward."""
        optimizer.register_step_post_hook(
            lambda opt, args, kwargs: self.schedule.prefetch_next_step()
        )

    def prefetch_next_step(self) -> None:
        """What `prefetch_after` runs; call it yourself right after the optimizer step (never
        before it: the gathers would read the old weights)."""
        self.schedule.prefetch_next_step()

    def wait_in_flight(self) -> None:
        """Block until every collective this engine issued has completed (e.g. the gathers
        `prefetch_next_step` started), so a timed step can end with no work still running.
        On CUDA the current stream waits for them; synchronise the device to block the host."""
        self.schedule.wait_in_flight()

    @property
    def schedule_log(self) -> list[tuple[str, str]]:
        """(op, unit) for every collective and unit forward/backward, in issue order."""
        return self.schedule.log

    @property
    def collective_log(self) -> list[tuple[str, str]]:
        """(op, unit) for every collective this rank issued, in issue order."""
        return [e for e in self.schedule_log if e[0] in COLLECTIVES]

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Clip the sharded gradients by their global L2 norm; return the norm.

        The squared norms of the shards were summed during backward, as each reduce-scatter
        was added into the master gradient: clipping is one scalar all-reduce and one scale.
        """
        return self.schedule.clip_grad_norm_(max_norm)

    def memory_report(self, optimizer: torch.optim.Optimizer | None = None) -> dict[str, Any]:
        """Bytes this rank holds by class: weights, grads, master, staging (and optimizer,
        when given the optimizer built on `parameters()`); and under `buffer_plan` the plan
        chosen, the engine's bytes with it, the plan it was chosen over and the budget.
        `held_bytes(report)` sums the classes."""
        report: dict[str, Any] = dict(self.buffers.bytes_by_class())
        if optimizer is not None:
            report["optimizer"] = 0
            for p in self.parameters():
                for v in optimizer.state.get(p, {}).values():
                    if isinstance(v, torch.Tensor):
                        report["optimizer"] += v.numel() * v.element_size()
        c = self.plan_choice
        report["buffer_plan"] = {
            "name": c.plan.name,
            "bytes": c.plan_bytes,
            "rejected": c.rejected.name if c.rejected is not None else None,
            "rejected_bytes": c.rejected_bytes,
            "budget_bytes": c.budget_bytes,
            "smallest": c.smallest.name if c.smallest is not None else None,
            "smallest_bytes": c.smallest_bytes,
        }
        return report

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """fp32 weights keyed by the module's original names, on CPU, on every rank."""
        return _state_dict.full_state_dict(self.layout, self.buffers, self.group)

    def full_grad_dict(self) -> dict[str, torch.Tensor]:
        """The reduced fp32 gradients keyed by original names (after the last backward)."""
        return _state_dict.full_grad_dict(self.layout, self.buffers, self.group)

    def load_full_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        """Load weights keyed by original names; each rank keeps its shard."""
        self.schedule.invalidate()  # before the master is written: nothing may read it
        _state_dict.load_full_state_dict(self.layout, self.buffers, self.group, sd)

    def local_state_dict(self) -> dict[str, Any]:
        """This rank's master shards, exactly as held."""
        return _state_dict.local_state_dict(self.layout, self.buffers, self.group)

    def load_local_state_dict(self, sd: dict[str, Any]) -> None:
        """Load this rank's shards from `local_state_dict()` of the same rank and world."""
        self.schedule.invalidate()  # before the master is written: nothing may read it
        _state_dict.load_local_state_dict(self.layout, self.buffers, self.group, sd)

    def full_optim_state_dict(
        self, optimizer: torch.optim.Optimizer
    ) -> dict[str, dict[str, torch.Tensor]]:
        """The optimizer's per-parameter state keyed by original names."""
        return _state_dict.full_optim_state_dict(self.layout, self.buffers, self.group, optimizer)

    # ---- construction -----------------------------------------------------------------

    def _move_into_buffers(
        self, values: Mapping[str, torch.Tensor], init_fn: Callable | None
    ) -> list[list[tuple[nn.Parameter, torch.Tensor]]]:
        """Load the module's values into this rank's master shards and bind every unit's
        parameters (then the resident unit's) to its buffer; return each one's (parameter,
        gradient view) pairs."""
        self._load_module_values(values)
        b = self.buffers
        grad_views = [
            bind_views(u, b.weight[k], b.grad[k])
            for u, k in zip(self.layout.units, b.buffer_of, strict=True)
        ]
        grad_views.append(bind_views(self.layout.resident, b.resident_weight, b.resident_grad))
        self._place_frozen_and_buffers(init_fn)
        return grad_views

    @torch.no_grad()
    def _load_module_values(self, values: Mapping[str, torch.Tensor]) -> None:
        b = self.buffers
        for u in self.layout.units:
            copy_into_shard(u, self.rank, values, b.master[b.master_shard(u)])
        copy_into_shard(self.layout.resident, self.rank, values, b.resident_master)

    @torch.no_grad()
    def _place_frozen_and_buffers(self, init_fn: Callable | None) -> None:
        for s in self.layout.frozen:
            value: torch.Tensor = frozen_param(s)
            if value.is_meta and init_fn is not None:
                value = init_fn(s.name, s.shape)
            value = value.to(self.device, self.param_dtype)
            s.module._parameters[s.attr] = nn.Parameter(value, requires_grad=False)
        for m in self.module.modules():
            for k, buf in m._buffers.items():
                if buf is not None:
                    m._buffers[k] = buf.to(self.device)


def _checkpointed_units(
    units: list[nn.Module], ckpt_units: int | Sequence[nn.Module]
) -> list[nn.Module]:
    chosen = units[:ckpt_units] if isinstance(ckpt_units, int) else list(ckpt_units)
    for m in chosen:
        if not any(m is u for u in units):
            raise ValueError(f"checkpointed module {type(m).__name__} is not a unit")
    return chosen


def _split_ends(
    units: list[nn.Module], ckpt: list[nn.Module]
) -> tuple[list[nn.Module], list[nn.Module]]:
    """The units with both ends split into vocabulary halves; a checkpointed end becomes
    its two checkpointed halves (the parent's forward calls the halves' hooks, which a
    recomputation must not call again)."""
    split = split_vocab_units(units)
    halves = {id(units[0]): split[:2], id(units[-1]): split[-2:]}
    return split, [h for m in ckpt for h in halves.get(id(m), [m])]


def _check_arguments(units: list[nn.Module], grad_accum_steps: int) -> None:
    if not units:
        raise ValueError("YaFSDP needs at least one unit")
    if grad_accum_steps < 1:
        raise ValueError(f"grad_accum_steps must be >= 1, got {grad_accum_steps}")


def _checkpointed(forward: Any, *args: Any, **kwargs: Any) -> Any:
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


class _LazyValues(Mapping[str, torch.Tensor]):
    """Parameter values computed on demand by `init_fn`, one at a time."""

    def __init__(self, init_fn: Callable[[str, torch.Size], torch.Tensor], shapes: dict) -> None:
        self._init_fn, self._shapes = init_fn, shapes

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._init_fn(name, self._shapes[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._shapes)

    def __len__(self) -> int:
        return len(self._shapes)


def _initial_values(
    module: nn.Module,
    init_fn: Callable[[str, torch.Size], torch.Tensor] | None,
    device: torch.device,
) -> Mapping[str, torch.Tensor]:
    params = dict(module.named_parameters())
    if init_fn is not None:
        return _LazyValues(init_fn, {name: p.shape for name, p in params.items()})
    meta = [name for name, p in params.items() if p.is_meta]
    if meta and device.type != "meta":
        raise ValueError(
            f"parameters {meta[:3]} are on the meta device: pass init_fn(name, shape) to "
            "initialise them shard by shard, or materialise the module first"
        )
    return params


def _default_device(module: nn.Module) -> torch.device:
    for p in module.parameters():
        if p.device.type != "meta":
            return p.device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
