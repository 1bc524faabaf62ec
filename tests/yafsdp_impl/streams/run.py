"""Train the engine on CPU with its CUDA stream branch taken, and log every buffer access.

The engine is built on CPU as usual; its `Streams` is then replaced by one made for a
CUDA device while `yafsdp_impl._events` sees `FakeCuda` as `torch.cuda`, so every event,
wait and stream switch of the GPU path runs, and the tensors stay on CPU. The process
group is whatever the caller initialised (gloo of one rank, or a fake one of any size).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import pytest
import torch

from tests.yafsdp_impl.models import build, loss_of, units_of, vocab_of
from tests.yafsdp_impl.streams.fake_cuda import FakeCuda
from tests.yafsdp_impl.streams.race_log import AccessLog, KernelLog, Race, logged_collectives
from yafsdp_impl import YaFSDP, _events

STEPS = 2
MAX_NORM = 0.5


@dataclass(frozen=True)
class Case:
    param_dtype: torch.dtype = torch.bfloat16
    reduce_dtype: torch.dtype = torch.float32
    grad_accum_steps: int = 1
    prefetch: bool = True
    buffer_plan: str = "auto"
    ckpt_units: int = 0
    clip: bool = True
    reload: str | None = None  # "full" or "local": the state dict saved and loaded after steps

    def __str__(self) -> str:
        dtype = str(self.param_dtype).removeprefix("torch.")
        reduce = str(self.reduce_dtype).removeprefix("torch.")
        prefetch = "prefetch" if self.prefetch else "noprefetch"
        return (
            f"{dtype}-reduce_{reduce}-accum{self.grad_accum_steps}-{prefetch}"
            f"-{self.buffer_plan}-ckpt{self.ckpt_units}"
            + ("" if self.clip else "-noclip")
            + (f"-reload_{self.reload}" if self.reload else "")
        )


@dataclass
class Outcome:
    races: list[Race]
    kernels: dict[str, int]  # stream name -> kernels on tracked buffers
    touched: set[tuple[str, str, str]]  # (stream, buffer, op) accesses seen
    cuda_calls: list[str]
    collectives: list[tuple[str, str]]


class _TorchWithFakeCuda(types.ModuleType):
    """`torch` for one module, with `cuda` replaced."""

    def __init__(self, cuda: types.SimpleNamespace) -> None:
        super().__init__("torch")
        self.cuda = cuda

    def __getattr__(self, name: str) -> object:
        return getattr(torch, name)


def track_engine(log: AccessLog, engine: YaFSDP) -> None:
    b = engine.buffers
    for k, (w, g) in enumerate(zip(b.weight, b.grad, strict=True)):
        log.track(f"weight buffer {k}", w)
        log.track(f"grad buffer {k}", g)
    named = {
        "resident weight": b.resident_weight, "resident grad": b.resident_grad,
        "master": b.master, "master grad": b.master_grad,
        "resident master": b.resident_master, "resident master grad": b.resident_master_grad,
        "gather source": b.gather_source, "resident gather source": b.resident_gather_source,
        "staging": b.staging, "resident staging": b.resident_staging,
        "grad squared norms": engine.schedule.grad_sq_norms,
    }  # fmt: skip
    if b.reduced is not None and b.resident_reduced is not None:
        named.update({"reduced": b.reduced, "resident reduced": b.resident_reduced})
    for name, t in named.items():
        log.track(name, t)


Watch = Callable[[torch.optim.Optimizer], AbstractContextManager]


def run_case(
    case: Case,
    monkeypatch: pytest.MonkeyPatch,
    drop_waits_of: frozenset[str] = frozenset(),
    watch: Watch = lambda optimizer: nullcontext(),
) -> Outcome:
    """STEPS steps (clipped, AdamW) on the stream branch; the races the log saw. `watch`
    gives a context entered around the steps (after the engine is built)."""
    cuda = FakeCuda(drop_waits_of)
    monkeypatch.setattr(_events, "torch", _TorchWithFakeCuda(cuda.module()))
    model = build("gpt")
    engine = YaFSDP(
        model, units_of(model), param_dtype=case.param_dtype, reduce_dtype=case.reduce_dtype,
        device="cpu",
        grad_accum_steps=case.grad_accum_steps, buffer_plan=case.buffer_plan,
        ckpt_units=case.ckpt_units,
    )  # fmt: skip
    engine.schedule.streams = _events.Streams(torch.device("cuda", 0))
    assert engine.schedule.streams.cuda, "the stream branch must be the one under test"
    opt = torch.optim.AdamW(engine.parameters(), lr=1e-3)
    if case.prefetch:
        engine.prefetch_after(opt)
    log = AccessLog(cuda)
    track_engine(log, engine)
    with watch(opt), logged_collectives(log, monkeypatch), KernelLog(log):
        for step in range(STEPS):
            for micro in range(case.grad_accum_steps):
                tokens = _tokens(vocab_of(model), step, micro)
                loss_of(engine, tokens).backward()
            if case.clip:
                engine.clip_grad_norm_(MAX_NORM)
            opt.step()
            opt.zero_grad()
            _reload(engine, case.reload)
        engine.wait_in_flight()
    # What a host would read after the last step: every buffer, on the compute stream
    # (the views made outside the dispatch mode, which would log `set_` as a write).
    everything = [torch.empty(0, dtype=torch.uint8).set_(s) for s in log.kept if s.nbytes()]
    log.kernel("read after wait_in_flight", everything, [])
    return Outcome(log.races, log.kernels, log.touched, cuda.calls, engine.collective_log)


def _reload(engine: YaFSDP, how: str | None) -> None:
    """Save and load the weights between steps, as a checkpoint resume does (the gathers
    `prefetch_after` started may still be in flight)."""
    if how == "full":
        engine.load_full_state_dict(engine.full_state_dict())
    elif how == "local":
        engine.load_local_state_dict(engine.local_state_dict())


def _tokens(vocab: int, step: int, micro: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(100 * step + micro)
    return torch.randint(0, vocab, (2, 9), generator=gen)
