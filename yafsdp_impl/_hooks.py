"""Module and autograd hooks that drive the schedule.

Forward: a pre-hook on each unit (positional and keyword inputs alike) and a post-hook.
Backward: the unit's outputs pass through `_PreBackward`, an identity whose backward runs
when the gradient reaches the unit, i.e. just before the unit's own backward kernels and
strictly after every later unit's backward (autograd runs the nodes of later units first).
The hook sits on outputs, whatever their structure, so no input needs wrapping.
Weights: a post-accumulate hook on each unit's parameter tells the schedule that its
gradient is in the unit's gradient buffer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

if TYPE_CHECKING:
    from yafsdp_impl._schedule import Schedule


class _PreBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, callback: Callable[[], None], *tensors: torch.Tensor):
        ctx.callback = callback
        return tensors

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor):
        ctx.callback()
        return (None, *grads)


def before_backward(output: Any, callback: Callable[[], None]) -> Any:
    """Return `output` with `callback` wired to run once its gradient arrives."""
    if not torch.is_grad_enabled():
        return output
    leaves, spec = tree_flatten(output)
    idx = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not idx:
        return output
    wrapped = _PreBackward.apply(callback, *(leaves[i] for i in idx))
    for i, t in zip(idx, wrapped, strict=True):
        leaves[i] = t
    return tree_unflatten(leaves, spec)


def register_unit_hooks(
    unit: nn.Module,
    pre_forward: Callable[[], None],
    post_forward: Callable[[], None],
    pre_backward: Callable[[], None],
) -> None:
    def _pre(module: nn.Module, args: tuple, kwargs: dict) -> None:
        pre_forward()

    def _post(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
        post_forward()
        return before_backward(output, pre_backward)

    unit.register_forward_pre_hook(_pre, with_kwargs=True)
    unit.register_forward_hook(_post, with_kwargs=True)


def hook_schedule(
    schedule: Schedule,
    root: nn.Module,
    units: Sequence[nn.Module],
    grad_views: Sequence[Sequence[tuple[nn.Parameter, torch.Tensor]]],
) -> None:
    """Drive `schedule` from `root`'s forward (the step opens), each unit's forward and
    backward, and each unit weight's gradient arriving (`grad_views`: one list of (param,
    gradient view) per unit, then the resident unit's, which needs no hook: it is reduced
    once, at the end of the step's backward)."""
    for views in grad_views[:-1]:
        for param, view in views:
            param.register_post_accumulate_grad_hook(
                functools.partial(_gradient_arrived, schedule, view)
            )
    root.register_forward_pre_hook(lambda module, args: schedule.on_root_forward())
    for i, unit in enumerate(units):
        register_unit_hooks(
            unit,
            functools.partial(schedule.pre_forward, i),
            schedule.close_range,
            functools.partial(schedule.pre_backward, i),
        )


def _gradient_arrived(schedule: Schedule, view: torch.Tensor, param: nn.Parameter) -> None:
    schedule.gradient_arrived(param, view)
