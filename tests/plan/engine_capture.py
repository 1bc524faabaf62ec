"""What a real engine launches in one steady-state step, one rank of a fake process group.

The engine is built and trained as a job would (`harness.rank.session.Session`),
on CPU tensors at a small size; a dispatch mode records every c10d collective (kind and
bytes: the unsharded buffer) and every kernel the step runs outside the model's own ops.
The fake process group returns at once, so values are wrong, but the calls, their order and
their sizes are the engine's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from harness.config import JobConfig
from harness.engines.registry import ENGINES
from harness.plan.time.kernels import _memory_bytes
from harness.rank.session import Session

# c10d op name -> the collective it is; list forms count every output chunk.
_KINDS = {
    "_allgather_base_": "all_gather",
    "allgather_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "allreduce_": "all_reduce",
}


@dataclass(frozen=True)
class Kernel:
    name: str  # the ATen op
    shapes: list[tuple[tuple[int, ...], str]]  # its tensor arguments: shape, dtype
    out_shapes: list[tuple[int, ...]]
    nbytes: int  # read and written, counted as the planner counts (harness.plan.time.kernels)


@dataclass
class Launched:
    collectives: list[tuple[str, int]] = field(default_factory=list)  # (kind, bytes)
    ops: list[Kernel] = field(default_factory=list)

    def named(self, prefix: str) -> list[Kernel]:
        return [k for k in self.ops if k.name.startswith(prefix)]


class _Record(TorchDispatchMode):
    def __init__(self, launched: Launched) -> None:
        super().__init__()
        self.launched = launched

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        name = str(func)
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if name.startswith("c10d."):
            kind = _KINDS.get(name.split(".")[1])
            if kind is not None:
                self.launched.collectives.append((kind, _unsharded_bytes(kind, name, tensors)))
        elif not func.is_view:
            shapes = [(tuple(t.shape), str(t.dtype).removeprefix("torch.")) for t in tensors]
            outs = [tuple(t.shape) for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            nbytes = _memory_bytes(name, args, kwargs, out)
            self.launched.ops.append(Kernel(name, shapes, outs, nbytes))
        return out


def _unsharded_bytes(kind: str, name: str, tensors: list[torch.Tensor]) -> int:
    nbytes = [t.numel() * t.element_size() for t in tensors]
    if name.startswith("c10d.allgather_."):  # outputs (one per rank), then the input
        return sum(nbytes[:-1])
    if kind == "all_reduce":
        return nbytes[0]
    return max(nbytes)  # all-gather output or reduce-scatter input: the larger buffer


@contextmanager
def fake_world(world_size: int) -> Iterator[None]:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def launched_by(job: JobConfig, *, steps_before: int = 1, spy: object = None) -> Launched:
    """One step's collectives and ops (after `steps_before` steps), under an initialised
    fake process group of `job.gpus` ranks. `spy`, a context manager, is entered around
    the recorded step only."""
    session = Session.build(job, 0, dist.get_world_size(), torch.device("cpu"))
    tokens = torch.randint(0, session.shape.vocab_size, (job.micro_batch, job.seq_len),
                           generator=torch.Generator().manual_seed(0))  # fmt: skip

    def step() -> None:  # the job's step on tokens drawn before any recording
        session.step_on(lambda micro: (tokens, tokens))

    for _ in range(steps_before):
        step()
    launched = Launched()
    with _Record(launched), spy or nullcontext():  # type: ignore[attr-defined]
        step()
    return launched


def job(label: str, world_size: int, **fields: object) -> JobConfig:
    defaults: dict[str, object] = dict(model="llama_tiny", seq_len=32, dtype="bf16",
                                       adamw_impl="foreach")  # fmt: skip
    return JobConfig(**{**defaults, **fields}, engine=ENGINES[label].config(), gpus=world_size)  # type: ignore[arg-type]
