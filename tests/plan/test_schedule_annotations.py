"""Every profiler range the engine's schedule opens is named by `yafsdp_impl.annotation_names`
and parses back to the collective it issues, in issue order: the units', the resident
unit's and the clipping's (the schedule driven on the meta device, as the planner drives it)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from harness.plan.memory.model import yafsdp_layout
from harness.plan.time.programs.yafsdp import _Recorder
from yafsdp_impl import Schedule, _clipping, _reduce_scatter, _schedule
from yafsdp_impl import annotation_names as names


def _drive(grad_accum: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], Schedule]:
    opened: list[str] = []

    @contextlib.contextmanager
    def recorded(name: str) -> Iterator[None]:
        opened.append(name)
        yield

    for module in (_schedule, _reduce_scatter, _clipping):
        monkeypatch.setattr(module, "record_function", recorded)
    layout, buffers, _ = yafsdp_layout("llama_tiny", 2, "bf16", "fp32", True, "auto", None)
    ends: list[Any] = []
    s = Schedule(layout, buffers, _Recorder(2),  # type: ignore[arg-type]
                 grad_accum_steps=grad_accum, grad_views=[[] for _ in range(len(layout.units) + 1)],
                 at_backward_end=ends.append)  # fmt: skip
    n = len(layout.units)
    with torch.no_grad():
        for _micro in range(grad_accum):
            s.on_root_forward()
            for i in range(n):
                s.pre_forward(i)
                s.close_range()
            for i in reversed(range(n)):
                s.pre_backward(i)
            ends.pop()()
        s.clip_grad_norm_(1.0)
        s.wait_in_flight()
    return opened, s


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_every_range_parses_to_what_the_schedule_issued(
    grad_accum: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened, s = _drive(grad_accum, monkeypatch)
    waits = [n for n in opened if n.startswith(f"{names.PREFIX}.wait.")]
    shard_grads = [n for n in opened if n.startswith(f"{names.PREFIX}.shard_grad.")]
    others = [n for n in opened if n not in waits and n not in shard_grads]
    parsed = [names.parse(n) for n in others]
    assert None not in parsed, [n for n in others if names.parse(n) is None]
    # every finished reduce-scatter's gradient is added into its master in a range of its own
    rs_waits = [n.removeprefix(f"{names.PREFIX}.wait.reduce_scatter.") for n in waits
                if n.startswith(f"{names.PREFIX}.wait.reduce_scatter.")]  # fmt: skip
    assert shard_grads == [names.shard_grad(u) for u in rs_waits] and shard_grads
    collectives = [(k, u) for k, u in parsed if k in names.COLLECTIVES]  # type: ignore[misc]
    issued = [(op, unit) for op, unit in s.log if op in names.COLLECTIVES]
    assert collectives == issued  # the ranges and the log name a unit alike: its path
    assert ("all_gather", names.RESIDENT) in issued
    assert ("reduce_scatter", names.RESIDENT) in issued
    assert ("all_reduce", names.CLIP) in issued
    n = len(s.layout.units)
    paths = ["tok_embeddings", *(f"layers.{i}" for i in range(n - 2)), "output"]
    assert [u.name for u in s.layout.units] == paths
    assert [u for k, u in parsed if k == "forward"] == paths * grad_accum
    assert names.wait_in_flight() in waits
