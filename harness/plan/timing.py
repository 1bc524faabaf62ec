"""Predicted iteration time: compute, exposed communication and other work, per engine.

Compute is the README's model FLOPs (6N' + 12 L d T per token) plus one more forward of
every checkpointed block, at the device's peak times its achieved efficiency. Each
collective is priced by the ring model (`collectives.py`). A two-stream simulation then
follows each engine's schedule: a gather issued ahead of a unit's compute hides behind
the compute before it; what the compute stream waits for is exposed. Memory-bound work
(gradient casts into the reduce buffer, FSDP2's copy-out of gathered weights, the AdamW
step) runs on the compute stream at the device's memory bandwidth: "other".
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.models.shapes import shape_of
from harness.plan.activations import DTYPE_BYTES
from harness.plan.collectives import Network
from harness.plan.units import fsdp1_units, fsdp2_units

FP32 = 4
# Bytes the fused AdamW step moves per sharded element: reads master, grad, both moments;
# writes master and both moments (fp32 each).
ADAMW_BYTES_PER_ELEMENT = 7 * FP32


@dataclass(frozen=True, kw_only=True)
class TimeCase:
    model: str
    engine: str
    world_size: int
    seq_len: int
    ckpt_layers: int
    micro_batch: int = 1
    grad_accum: int = 1
    dtype: str = "bf16"
    reduce_dtype: str = "fp32"


@dataclass(frozen=True, kw_only=True)
class TimeEstimate:
    iteration_time_s: float
    compute_s: float
    exposed_comm_s: float
    other_s: float
    comm_s: float  # all communication, hidden or not
    tokens_per_s: float  # per device
    mfu: float


class _Streams:
    """A compute stream and one communication stream (collectives of one process group
    run one after another), advanced in program order."""

    def __init__(self) -> None:
        self.compute_at = 0.0
        self.comm_at = 0.0
        self.done: dict[str, float] = {}
        self.busy = {"compute": 0.0, "other": 0.0, "comm": 0.0}

    def issue(self, name: str, seconds: float) -> None:
        start = max(self.comm_at, self.compute_at)  # issued when the program reaches it
        self.comm_at = start + seconds
        self.done[name] = self.comm_at
        self.busy["comm"] += seconds

    def wait(self, name: str) -> None:
        if name in self.done:
            self.compute_at = max(self.compute_at, self.done.pop(name))

    def run(self, seconds: float, kind: str = "compute") -> None:
        self.compute_at += seconds
        self.busy[kind] += seconds

    def wait_all(self) -> None:
        self.compute_at = max(self.compute_at, self.comm_at)
        self.done.clear()


def estimate_time(
    case: TimeCase, net: Network, *, peak_flops: float, efficiency: float, memory_gbps: float
) -> TimeEstimate:
    shape = shape_of(case.model)
    tokens = case.micro_batch * case.seq_len
    rate = peak_flops * efficiency
    layer_fwd = tokens * (2 * shape.layer_params() + 4 * shape.dim * case.seq_len) / rate
    head_fwd = tokens * 2 * shape.vocab_size * shape.dim / rate
    p, r = DTYPE_BYTES[case.dtype], DTYPE_BYTES[case.reduce_dtype]
    units = (fsdp2_units if case.engine.startswith("fsdp2") else fsdp1_units)(
        shape, case.world_size
    )
    sizes = [units.embedding, *[units.block] * shape.n_layers, units.output]
    fwd = [0.0, *[layer_fwd] * shape.n_layers, head_fwd]
    bwd = [2 * f for f in fwd]
    for k in range(1, 1 + case.ckpt_layers):
        bwd[k] += layer_fwd  # recompute
    n = len(sizes)
    mem_bw = memory_gbps * 1e9

    def gather(i: int) -> float:
        return net.time_s("all_gather", sizes[i] * p)

    def reduce(i: int) -> float:
        return net.time_s("reduce_scatter", sizes[i] * r)

    def cast_for_reduce(i: int) -> float:  # the gradient copied into the reduce dtype
        return sizes[i] * (p + r) / mem_bw if mem_bw else 0.0

    def copy_out(i: int) -> float:  # FSDP2 copies the gathered buffer into each parameter
        return 2 * sizes[i] * p / mem_bw if mem_bw else 0.0

    s = _Streams()
    engine = case.engine
    if engine == "local":  # whole model on every rank: compute, then one fp32 all-reduce
        s.run(case.grad_accum * (sum(fwd) + sum(bwd)))
        s.issue("ar", net.time_s("all_reduce", shape.num_params() * FP32))
        s.wait_all()
        s.run(shape.num_params() * ADAMW_BYTES_PER_ELEMENT / mem_bw if mem_bw else 0.0, "other")
        return _estimate(s, case, tokens, shape.flops_per_token(case.seq_len), peak_flops)
    fsdp2 = engine.startswith("fsdp2")
    for _micro in range(case.grad_accum):
        # forward: every engine gathers one unit ahead of the compute
        s.issue("ag0", gather(0))
        for i in range(n):
            if i + 1 < n:
                s.issue(f"ag{i + 1}", gather(i + 1))
            s.wait(f"ag{i}")
            if fsdp2:
                s.run(copy_out(i), "other")
            s.run(fwd[i])
        # backward, last unit first
        still_gathered = {n - 1, n - 2} if engine == "yafsdp" else ({n - 1} if fsdp2 else set())
        if n - 1 not in still_gathered:
            s.issue(f"bg{n - 1}", gather(n - 1))
        pending: list[int] = []
        for i in reversed(range(n)):
            if i - 1 >= 0 and i - 1 not in still_gathered:
                s.issue(f"bg{i - 1}", gather(i - 1))
            if engine == "yafsdp":  # lazily: unit i+2's gradient buffer is needed now
                for u in [u for u in pending if u == i + 2]:
                    s.issue(f"rs{u}", reduce(u))
                    pending.remove(u)
            s.wait(f"bg{i}")
            if fsdp2 and i not in still_gathered:
                s.run(copy_out(i), "other")
            s.run(bwd[i])
            s.run(cast_for_reduce(i), "other")
            if engine == "yafsdp":
                pending.append(i)
            else:
                s.issue(f"rs{i}", reduce(i))
        for u in sorted(pending, reverse=True):
            s.issue(f"rs{u}", reduce(u))
        s.wait_all()
    s.issue("clip", net.time_s("all_reduce", 8))
    s.wait_all()
    shard = units.shard
    s.run(shard * ADAMW_BYTES_PER_ELEMENT / mem_bw if mem_bw else 0.0, "other")
    if engine == "yafsdp":  # the param-dtype copy of the master shards
        s.run(shard * (FP32 + p) / mem_bw if mem_bw else 0.0, "other")
    return _estimate(s, case, tokens, shape.flops_per_token(case.seq_len), peak_flops)


def _estimate(
    s: _Streams, case: TimeCase, tokens: int, flops_per_token: float, peak_flops: float
) -> TimeEstimate:
    total = s.compute_at
    compute, other = s.busy["compute"], s.busy["other"]
    tokens_step = tokens * case.grad_accum
    return TimeEstimate(
        iteration_time_s=total,
        compute_s=compute,
        exposed_comm_s=total - compute - other,
        other_s=other,
        comm_s=s.busy["comm"],
        tokens_per_s=tokens_step / total,
        mfu=tokens_step / total * flops_per_token / peak_flops,
    )
