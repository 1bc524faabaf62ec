"""`YaFSDP`: wrap a module whose units run in a known order, shard it, and train it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.autograd import Variable
from torch.autograd.profiler import record_function
from torch.utils.checkpoint import checkpoint

from yafsdp_impl import collectives, state_dict
from yafsdp_impl.buffers import Buffers, bind_views
from yafsdp_impl.hooks import register_unit_hooks
from yafsdp_impl.layout import build_layout, copy_into_shard
from yafsdp_impl.schedule import DONE, Event, Scheduler

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")


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
    ) -> None:
        units = list(units)
        if not units:
            raise ValueError("YaFSDP needs at least one unit")
        if grad_accum_steps < 1:
            raise ValueError(f"grad_accum_steps must be >= 1, got {grad_accum_steps}")
        self.module = module
        self.group = process_group or dist.distributed_c10d._get_default_group()
        self.rank = dist.get_rank(self.group)
        self.world_size = dist.get_world_size(self.group)
        self.param_dtype = param_dtype
        self.reduce_dtype = reduce_dtype
        self.grad_accum_steps = grad_accum_steps
        self.device = torch.device(device) if device is not None else _default_device(module)

        self.layout = build_layout(module, units, self.world_size)
        self.buffers = Buffers(
            self.layout,
            device=self.device,
            param_dtype=param_dtype,
            reduce_dtype=reduce_dtype,
            native_reduce_scatter=collectives.has_native_reduce_scatter(self.group),
        )
        self._init_fn = init_fn
        self._load_module_values(_initial_values(module, init_fn, self.device))
        self._grad_views = [
            bind_views(u, self.buffers.weight[i % 2], self.buffers.grad[i % 2])
            for i, u in enumerate(self.layout.units)
        ]
        self._grad_views.append(
            bind_views(
                self.layout.resident, self.buffers.resident_weight, self.buffers.resident_grad
            )
        )
        self._place_frozen_and_buffers()
        self._wrap_checkpointing(units, ckpt_units)

        self.scheduler = Scheduler(self.device)
        self.schedule_log: list[tuple[str, str]] = []
        self._version = 0  # bumped whenever the master weights may have changed (a new step)
        self._owner: list[int | None] = [None, None]  # unit held by each weight buffer ...
        self._owner_version = [-1, -1]  # ... and of which version
        self._ready: list[Event] = [DONE, DONE]
        self._resident_ready: Event = DONE
        # The reduce-scatter reading the staging buffer, and the resident unit's.
        self._inflight: tuple[Event, torch.Tensor, torch.Tensor, str] | None = None
        self._resident_inflight: tuple[Event, torch.Tensor, torch.Tensor, str] | None = None
        self._waiting_grads: set[int] = set()  # units whose gradients sit in a grad buffer
        self._micro = 0
        self._step_open = False
        self._in_backward = False
        self._range: Any = None  # the open record_function of the current unit

        module.register_forward_pre_hook(lambda m, a: self._on_root_forward())
        for i in range(len(units)):
            register_unit_hooks(
                units[i],
                functools.partial(self._pre_forward, i),
                self._close_range,
                functools.partial(self._pre_backward, i),
            )

    # ---- public API -------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def parameters(self) -> list[nn.Parameter]:
        """The fp32 master shards, one flat parameter per unit: what the optimizer updates."""
        return list(self.buffers.master_params)

    @property
    def collective_log(self) -> list[tuple[str, str]]:
        """(op, unit) for every collective this rank issued, in issue order."""
        return [e for e in self.schedule_log if e[0] in COLLECTIVES]

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Clip the sharded gradients by their global L2 norm (one all-reduce); return it."""
        b = self.buffers
        # Accumulated in fp64 (no gradient-sized temporary): millions of fp32 squares would
        # otherwise lose ~1e-5 of the norm to summation order.
        sq = (
            torch.stack(
                [
                    torch.linalg.vector_norm(g, dtype=torch.float64)
                    for g in (b.master_grad, b.resident_master_grad)
                ]
            )
            .square()
            .sum()
        )
        with record_function("yafsdp.all_reduce.clip"):
            collectives.all_reduce_sum(sq, self.group)
        self._log("all_reduce", "clip")
        norm = sq.sqrt()
        coef = (max_norm / (norm + 1e-6)).clamp(max=1.0).float()
        b.master_grad.mul_(coef)
        b.resident_master_grad.mul_(coef)
        return norm.float()

    def memory_report(self, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
        """Bytes this rank holds by class: weights, grads, master, staging (and optimizer,
        when given the optimizer built on `parameters()`)."""
        report = self.buffers.bytes_by_class()
        if optimizer is not None:
            report["optimizer"] = 0
            for p in self.parameters():
                for v in optimizer.state.get(p, {}).values():
                    if isinstance(v, torch.Tensor):
                        report["optimizer"] += v.numel() * v.element_size()
        return report

    full_state_dict = state_dict.full_state_dict
    full_grad_dict = state_dict.full_grad_dict
    load_full_state_dict = state_dict.load_full_state_dict
    local_state_dict = state_dict.local_state_dict
    load_local_state_dict = state_dict.load_local_state_dict
    full_optim_state_dict = state_dict.full_optim_state_dict

    # ---- construction -----------------------------------------------------------------

    @torch.no_grad()
    def _load_module_values(self, values: Mapping[str, torch.Tensor]) -> None:
        b = self.buffers
        for u in self.layout.units:
            copy_into_shard(u, self.rank, values, b.master[b.master_shard(u)])
        copy_into_shard(self.layout.resident, self.rank, values, b.resident_master)

    @torch.no_grad()
    def _place_frozen_and_buffers(self) -> None:
        for s in self.layout.frozen:
            value = s.module._parameters[s.attr]
            if value.is_meta and self._init_fn is not None:
                value = self._init_fn(s.name, s.shape)
            value = value.to(self.device, self.param_dtype)
            s.module._parameters[s.attr] = nn.Parameter(value, requires_grad=False)
        for m in self.module.modules():
            for k, buf in m._buffers.items():
                if buf is not None:
                    m._buffers[k] = buf.to(self.device)

    def _wrap_checkpointing(
        self, units: list[nn.Module], ckpt_units: int | Sequence[nn.Module]
    ) -> None:
        chosen = units[:ckpt_units] if isinstance(ckpt_units, int) else list(ckpt_units)
        for m in chosen:
            if not any(m is u for u in units):
                raise ValueError(f"checkpointed module {type(m).__name__} is not a unit")
            m.forward = functools.partial(_checkpointed, m.forward)

    # ---- the schedule -----------------------------------------------------------------

    def _log(self, op: str, unit: str) -> None:
        self.schedule_log.append((op, unit))

    def _on_root_forward(self) -> None:
        if not self._step_open:
            self._open_step()
        self._gather(0)
        # Resident weights may be used anywhere in the forward, even before the first unit.
        with record_function("yafsdp.wait.all_gather.norm"):
            self._resident_ready.wait()
        self._resident_ready = DONE

    def _open_step(self) -> None:
        b = self.buffers
        self._version += 1
        self._copy_master_to_lowp()
        b.attach_master_grads()
        b.master_grad.zero_()
        b.resident_master_grad.zero_()
        for views in self._grad_views:
            for p, g in views:
                if p.grad is not g:
                    p.grad = g
        out, shard = b.resident_weight, b.resident_lowp
        with record_function("yafsdp.all_gather.norm"):
            self._resident_ready = self.scheduler.launch(
                lambda a: collectives.all_gather(out, shard, self.group, a),
                self.scheduler.compute_event(),
            )
        self._log("all_gather", "norm")
        self._step_open = True

    @torch.no_grad()
    def _copy_master_to_lowp(self) -> None:
        """The once-per-step param-dtype copy of the master shards that the gathers read."""
        b = self.buffers
        if b.lowp is not b.master:
            b.lowp.copy_(b.master)
            b.resident_lowp.copy_(b.resident_master)

    def _gather(self, i: int) -> None:
        k = i % 2
        if self._owner[k] == i and self._owner_version[k] == self._version:
            return  # still holds this unit's current weights: no re-gather
        unit = self.layout.units[i]
        out = self.buffers.weight[k][: unit.padded_numel]
        shard = self.buffers.lowp[self.buffers.master_shard(unit)]
        # The compute event is buffer k's *released* point: its previous unit is done.
        released = self.scheduler.compute_event()
        with record_function(f"yafsdp.all_gather.{unit.name}"):
            self._ready[k] = self.scheduler.launch(
                lambda a: collectives.all_gather(out, shard, self.group, a), released
            )
        self._owner[k], self._owner_version[k] = i, self._version
        self._log("all_gather", unit.name)

    def _wait_weights(self, i: int) -> None:
        k = i % 2
        if self._owner[k] != i or self._owner_version[k] != self._version:
            raise RuntimeError(
                f"unit {i} runs but weight buffer {k} holds unit {self._owner[k]}: units must "
                "run in the order given to YaFSDP, each once per forward"
            )
        with record_function(f"yafsdp.wait.all_gather.unit{i}"):
            self._ready[k].wait()
        self._ready[k] = DONE

    def _open_range(self, name: str) -> None:
        self._close_range()
        self._range = record_function(name)
        self._range.__enter__()

    def _close_range(self) -> None:
        if self._range is not None:
            self._range.__exit__(None, None, None)
            self._range = None

    def _pre_forward(self, i: int) -> None:
        if i + 1 < len(self.layout.units):
            self._gather(i + 1)
        self._wait_weights(i)
        self._log("forward", f"unit{i}")
        self._open_range(f"yafsdp.forward.unit{i}")

    def _pre_backward(self, i: int) -> None:
        if not self._in_backward:
            self._in_backward = True
            Variable._execution_engine.queue_callback(self._end_backward)
        self._close_range()
        self._log("backward", f"unit{i}")
        if i > 0:
            self._gather(i - 1)
        if i + 2 in self._waiting_grads:
            self._reduce_scatter(i + 2)  # lazy: its gradient buffer is needed now
        self._wait_weights(i)
        self.buffers.grad[i % 2][: self.layout.units[i].padded_numel].zero_()
        self._waiting_grads.add(i)
        self._open_range(f"yafsdp.backward.unit{i}")

    def _reduce_scatter(self, i: int) -> None:
        k = i % 2
        b = self.buffers
        unit = self.layout.units[i]
        self._waiting_grads.discard(i)
        self._fold(resident=False)
        staging = b.staging[: unit.padded_numel]
        staging.copy_(b.grad[k][: unit.padded_numel])
        out = b.rs_out[: unit.shard_numel] if b.rs_out is not None else None
        self._inflight = self._launch_reduce_scatter(
            unit.name, out, staging, b.master_grad[b.master_shard(unit)]
        )

    def _launch_reduce_scatter(
        self, name: str, out: torch.Tensor | None, full: torch.Tensor, dst: torch.Tensor
    ) -> tuple[Event, torch.Tensor, torch.Tensor, str]:
        result: list[torch.Tensor] = []

        def collective(async_op: bool) -> dist.Work | None:
            work, res = collectives.reduce_scatter(
                out, full, self.group, self.rank, self.world_size, async_op
            )
            result.append(res)
            return work

        with record_function(f"yafsdp.reduce_scatter.{name}"):
            event = self.scheduler.launch(collective, self.scheduler.compute_event())
        self._log("reduce_scatter", name)
        return event, result[0], dst, name

    def _fold(self, resident: bool) -> None:
        """Wait for the unit (or resident) reduce-scatter in flight; add it to the master grad."""
        pending = self._resident_inflight if resident else self._inflight
        if pending is None:
            return
        event, result, dst, name = pending
        with record_function(f"yafsdp.wait.reduce_scatter.{name}"):
            event.wait()
        dst.add_(result)
        if resident:
            self._resident_inflight = None
        else:
            self._inflight = None

    def _end_backward(self) -> None:
        self._close_range()
        b = self.buffers
        for i in sorted(self._waiting_grads, reverse=True):
            self._reduce_scatter(i)
        b.resident_staging.add_(b.resident_grad)
        b.resident_grad.zero_()
        last = self._micro + 1 == self.grad_accum_steps
        if last:
            res = self.layout.resident
            self._resident_inflight = self._launch_reduce_scatter(
                res.name, b.resident_rs_out, b.resident_staging, b.resident_master_grad
            )
        self._fold(resident=False)
        self._fold(resident=True)
        if last:
            # The one division of the step: the reduction above was a plain sum.
            b.master_grad.div_(self.world_size * self.grad_accum_steps)
            b.resident_master_grad.div_(self.world_size * self.grad_accum_steps)
            b.resident_staging.zero_()
            self._micro = 0
            self._step_open = False
        else:
            self._micro += 1
        self._in_backward = False


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
