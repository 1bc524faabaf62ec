"""A host program run on a simulated GPU, then written as a Kineto trace (for tests).

The host thread runs the program's operations in order: a launch takes LAUNCH_US of host
time and its kernel starts no earlier than LATENCY_US after the launch call began, once its
stream is free and every kernel it waits for (a stream-wait event) has ended. A
synchronisation blocks the host until every kernel launched so far has ended. Ranges wrap
operations in a named profiler range. What the simulated GPU did is therefore known to the
microsecond, and tests can inject one cause of known size and look for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.trace.synthetic import CPU_TID, Kernel, Span, write_gpu_trace

LAUNCH_US = 4.0  # host time of one cudaLaunchKernel
LATENCY_US = 5.0  # from the launch call's start to the earliest kernel start
SYNC_TAIL_US = 1.0  # a synchronisation returns this long after the device drained
GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"
CAST = "void at::native::unrolled_elementwise_kernel<at::native::copy_kernel_cuda, bf16>"
OPTIMIZER_KERNEL = "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor<float>>"
ALL_GATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
REDUCE_SCATTER = "ncclDevKernel_ReduceScatter_RING_LL_Sum_float(ncclDevComm*, unsigned long)"
ALL_REDUCE = "ncclDevKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long)"


@dataclass(frozen=True)
class Launch:
    name: str
    stream: int
    dur: float
    key: str = ""  # a name later launches can wait for
    waits: tuple[str, ...] = ()  # keys of kernels this one waits for (stream-wait events)
    nelems: int = 0  # NCCL kernels: unsharded element count


@dataclass(frozen=True)
class Host:
    """The host busy in one call or operator for `dur` (no device work issued)."""

    name: str
    dur: float
    cat: str = "cpu_op"


@dataclass(frozen=True)
class Sync:
    """A synchronisation: the host blocks until the device has drained."""

    name: str = "cudaDeviceSynchronize"


@dataclass(frozen=True)
class Range:
    name: str
    ops: Sequence[Op]


Op = Launch | Host | Sync | Range


@dataclass
class _Machine:
    host: float = 0.0
    step: int = 1
    stream_free: dict[int, float] = field(default_factory=dict)
    ends: dict[str, float] = field(default_factory=dict)
    drained: float = 0.0
    kernels: list[Kernel] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)

    def run(self, op: Op) -> None:
        if isinstance(op, Launch):
            start = max(
                [self.host + LATENCY_US, self.stream_free.get(op.stream, 0.0)]
                + [self.ends[k] for k in op.waits]
            )
            end = start + op.dur
            self.kernels.append(
                Kernel(self.step, op.stream, start, op.dur, op.name, launch=self.host,
                       tid=CPU_TID, nelems=op.nelems)
            )  # fmt: skip
            self.stream_free[op.stream] = end
            self.drained = max(self.drained, end)
            if op.key:
                self.ends[op.key] = end
            self.host += LAUNCH_US
        elif isinstance(op, Host):
            self.spans.append(Span(op.name, self.host, op.dur, op.cat))
            self.host += op.dur
        elif isinstance(op, Sync):
            dur = max(self.drained - self.host, 0.0) + SYNC_TAIL_US
            self.spans.append(Span(op.name, self.host, dur))
            self.host += dur
        else:
            start = self.host
            for inner in op.ops:
                self.run(inner)
            self.spans.append(Span(op.name, start, self.host - start, "user_annotation"))


def simulate(steps: Sequence[Sequence[Op]]) -> tuple[list[Kernel], list[Span]]:
    """Run each step's operations in turn (steps numbered from 1)."""
    m = _Machine()
    for number, ops in enumerate(steps, start=1):
        m.step = number
        for op in ops:
            m.run(op)
    return m.kernels, m.spans


def write_program(path: Path | str, steps: Sequence[Sequence[Op]], world_size: int = 2) -> Path:
    kernels, spans = simulate(steps)
    return write_gpu_trace(path, kernels, spans=spans, rank=0, world_size=world_size)
