"""Catch, on CPU, what would make the host wait for a CUDA device.

`HostSyncs` logs every op whose result the host must read before it can go on (a scalar
read by `.item()`, `bool()`, `float()`; an output whose size depends on the values, as
`nonzero`, `masked_select`, `unique`, `repeat_interleave` with a tensor and no
`output_size`; `equal`) and every Python call that copies a tensor to the host
(`.tolist()`, `.numpy()`, and `.cpu()`, `.to("cpu")` outside torch, whose own calls
move tensors to the compute device: the host in this test). On CPU none of these waits, so a test
runs a step under it and expects nothing logged. `exempt()` names tensors that live on the
host even in a CUDA run (AdamW's step counters when not fused or capturable).
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

aten = torch.ops.aten

SYNCING_OPS = {
    aten._local_scalar_dense.default,  # .item(), bool(), float(), int() of a tensor
    aten.is_nonzero.default,
    aten.equal.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
}
COPYING_METHODS = ("tolist", "cpu", "numpy", "to")


@dataclass(frozen=True)
class Sync:
    what: str
    where: str  # the innermost frames outside torch and this module

    def __str__(self) -> str:
        return f"{self.what} at {self.where}"


def optimizer_step_counters(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """AdamW's `step` tensors: on the host unless fused or capturable (a read is free)."""
    return [s["step"] for s in optimizer.state.values() if isinstance(s.get("step"), torch.Tensor)]


def _to_host(args: tuple, kwargs: dict) -> bool:
    for a in [*args, *kwargs.values()]:
        if isinstance(a, torch.device | str) and torch.device(a).type == "cpu":
            return True
    return False


class HostSyncs(TorchDispatchMode):
    def __init__(self, exempt: Callable[[], Iterable[torch.Tensor]] = list) -> None:
        super().__init__()
        self.exempt = exempt
        self.found: list[Sync] = []
        self._saved: dict[str, Any] = {}

    def _exempted(self, tensors: list[torch.Tensor]) -> bool:
        host = {t.untyped_storage().data_ptr() for t in self.exempt()}
        return bool(tensors) and all(t.untyped_storage().data_ptr() in host for t in tensors)

    def _log(self, what: str, tensors: list[torch.Tensor]) -> None:
        if self._exempted(tensors):
            return
        frames = [f for f in traceback.extract_stack()[:-2] if "/torch/" not in f.filename]
        frames = [f for f in frames if f.filename != __file__]
        innermost = reversed(frames[-3:])  # each called from the next
        where = " <- ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}" for f in innermost)
        self.found.append(Sync(what, where))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        by_values = func is aten.repeat_interleave.Tensor and kwargs.get("output_size") is None
        if func in SYNCING_OPS or by_values:
            self._log(str(func), [t for t in tree_leaves(args) if isinstance(t, torch.Tensor)])
        return func(*args, **kwargs)

    def __enter__(self) -> HostSyncs:
        for name in COPYING_METHODS:
            self._saved[name] = vars(torch.Tensor).get(name)  # None: inherited
            setattr(torch.Tensor, name, self._copying(name, getattr(torch.Tensor, name)))
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        for name, own in self._saved.items():
            if own is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, own)

    def _copying(self, name: str, real: Callable) -> Callable:
        def method(t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            # torch's own `.to(device)`/`.cpu()` go to the compute device, CPU in this test:
            # only the project's code naming the host is a copy to it.
            ours = "/torch/" not in sys._getframe(1).f_code.co_filename
            moves = name in ("tolist", "numpy") or (ours and name == "cpu")
            if moves or (ours and name == "to" and _to_host(args, kwargs)):
                self._log(f"Tensor.{name}", [t])
            return real(t, *args, **kwargs)

        return method
