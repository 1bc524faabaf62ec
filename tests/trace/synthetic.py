"""Small hand-described GPU traces in the layout torch.profiler writes (for tests, benchmarks).

A kernel is given by its step, stream, name, start and duration (microseconds). The writer
adds what real traces carry around it: a CPU thread with ProfilerStep#N spans, one
cudaLaunchKernel per kernel (linked by correlation id), and `distributedInfo`.

Today's CUDA layout can be asked for: a kernel may be launched at a given time from
autograd's device thread (`pt_autograd_0`, where backward runs) inside an engine
annotation, and `gpu_step_copies` adds Kineto's GPU-lane copy of every ProfilerStep#N.

As Kineto writes them, each launch is linked to its kernel by a flow event pair (`ac2g`,
`s` at the launch, `f` at the kernel), and an NCCL kernel given `nelems` carries the
collective's args ("Collective name", "In msg nelems", "dtype", "Process Group Name", ...).
Any other CPU event (runtime calls such as cudaDeviceSynchronize or cudaMalloc, engine or
optimizer ranges, operators) is given as a `Span`.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

CPU_PID, CPU_TID, DEVICE = 1000, 1000, 0
AUTOGRAD_TID = 1001
THREAD_NAMES = {CPU_TID: "pt_main_thread", AUTOGRAD_TID: "pt_autograd_0"}
COMPUTE_KERNEL = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn"
NCCL_KERNEL = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


class Kernel(NamedTuple):
    step: int
    stream: int
    start: float
    dur: float
    name: str = COMPUTE_KERNEL
    launch: float | None = None  # CPU launch time; None: spaced before the step's kernels
    tid: int = CPU_TID  # the launching thread (AUTOGRAD_TID for backward)
    annotation: str = ""  # an engine range around the launch: yafsdp.reduce_scatter.layers.0
    nelems: int = 0  # an NCCL kernel's element count (float32), written as Kineto's args


class Span(NamedTuple):
    """A CPU event written as given: a runtime call, a range, an operator."""

    name: str
    start: float
    dur: float
    cat: str = "cuda_runtime"  # or user_annotation, cpu_op
    tid: int = CPU_TID


def nccl(step: int, stream: int, start: float, dur: float, **kw: Any) -> Kernel:
    return Kernel(step, stream, start, dur, NCCL_KERNEL, **kw)


def _collective_args(k: Kernel, world: int) -> dict[str, Any]:
    """Kineto's args of an NCCL kernel; `nelems` counts the unsharded elements."""
    if k.nelems <= 0 or not k.name.startswith("nccl"):
        return {}
    name = k.name.split("_")[1].lower()  # ncclDevKernel_AllGather_... -> allgather
    shard = k.nelems // world
    counts = {"allgather": (shard, k.nelems), "reducescatter": (k.nelems, shard)}
    n_in, n_out = counts.get(name, (k.nelems, k.nelems))
    return {
        "Collective name": name, "In msg nelems": n_in, "Out msg nelems": n_out,
        "Group size": world, "dtype": "Float", "In split size": "[]", "Out split size": "[]",
        "Process Group Name": "0", "Process Group Description": "default_pg",
        "Process Group Ranks": str(list(range(world))),
    }  # fmt: skip


def _category(name: str) -> str:
    return {"Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}.get(name[:6], "kernel")


def _events(
    kernels: Sequence[Kernel],
    first_correlation: int = 1,
    gpu_step_copies: bool = False,
    world: int = 1,
) -> Iterator[dict[str, Any]]:
    by_step: dict[int, list[Kernel]] = {}
    for k in kernels:
        by_step.setdefault(k.step, []).append(k)
    steps = sorted(by_step)
    first = {
        s: min(min(k.start, k.start if k.launch is None else k.launch) for k in by_step[s])
        for s in steps
    }
    corr = first_correlation
    for i, s in enumerate(steps):
        ks = sorted(by_step[s], key=lambda k: k.start)
        # CPU step windows tile the time before each step's first kernel (launch runs ahead)
        lo = first[s] - 10.0
        hi = first[steps[i + 1]] - 10.0 if i + 1 < len(steps) else max(k.start + k.dur for k in ks)
        yield {
            "ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}",
            "pid": CPU_PID, "tid": CPU_TID, "ts": lo, "dur": hi - lo, "args": {},
        }  # fmt: skip
        if gpu_step_copies:  # Kineto's copy on the GPU lane: shorter, starting later
            yield {
                "ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{s}",
                "pid": DEVICE, "tid": ks[0].stream, "ts": ks[0].start, "dur": ks[0].dur,
                "args": {"External id": s},
            }  # fmt: skip
        spacing = min(1.0, 9.0 / (len(ks) + 1))
        for j, k in enumerate(ks):
            launch = lo + spacing * (j + 1) * 0.5 if k.launch is None else k.launch
            if k.annotation:
                yield {
                    "ph": "X", "cat": "user_annotation", "name": k.annotation,
                    "pid": CPU_PID, "tid": k.tid, "ts": launch - 0.01, "dur": spacing * 0.3,
                    "args": {},
                }  # fmt: skip
            yield {
                "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                "pid": CPU_PID, "tid": k.tid, "ts": launch, "dur": spacing * 0.25,
                "args": {"correlation": corr, "cbid": 211},
            }  # fmt: skip
            yield {
                "ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": CPU_PID, "tid": k.tid,
                "ts": launch,
            }  # fmt: skip
            yield {
                "ph": "X", "cat": _category(k.name), "name": k.name, "pid": DEVICE, "tid": k.stream,
                "ts": k.start, "dur": k.dur,
                "args": {"device": DEVICE, "stream": k.stream, "correlation": corr,
                         "grid": [1, 1, 1], "block": [128, 1, 1], **_collective_args(k, world)},
            }  # fmt: skip
            yield {
                "ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": DEVICE,
                "tid": k.stream, "ts": k.start, "bp": "e",
            }  # fmt: skip
            corr += 1


def _write(
    fh: IO[str], event_batches: Iterable[Iterable[dict[str, Any]]], rank: int, world: int
) -> None:
    info = {"backend": "nccl", "rank": rank, "world_size": world}
    fh.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [],\n')
    fh.write(f'  "distributedInfo": {json.dumps(info)},\n  "traceEvents": [\n')
    sep = ""
    for tid, name in THREAD_NAMES.items():
        meta = {"ph": "M", "name": "thread_name", "pid": CPU_PID, "tid": tid}
        fh.write(sep + "  " + json.dumps({**meta, "args": {"name": name}}))
        sep = ",\n"
    for batch in event_batches:
        for e in batch:
            fh.write(sep + "  " + json.dumps(e))
            sep = ",\n"
    fh.write('\n  ],\n  "displayTimeUnit": "ms",\n  "traceName": "synthetic"\n}\n')


def _open(path: Path) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return gzip.open(path, "wt") if path.suffix == ".gz" else open(path, "w")


def _span_events(spans: Sequence[Span]) -> Iterator[dict[str, Any]]:
    for sp in spans:
        yield {
            "ph": "X", "cat": sp.cat, "name": sp.name, "pid": CPU_PID, "tid": sp.tid,
            "ts": sp.start, "dur": sp.dur, "args": {},
        }  # fmt: skip


def write_gpu_trace(
    path: Path | str,
    kernels: Sequence[Kernel],
    *,
    rank: int = 0,
    world_size: int = 1,
    gpu_step_copies: bool = False,
    spans: Sequence[Span] = (),
) -> Path:
    path = Path(path)
    events = _events(kernels, gpu_step_copies=gpu_step_copies, world=world_size)
    with _open(path) as fh:
        _write(fh, [events, _span_events(spans)], rank, world_size)
    return path


def write_large_gpu_trace(
    path: Path | str,
    *,
    target_bytes: int,
    rank: int = 0,
    kernels_per_step: int = 2000,
    nelems: int = 0,
) -> Path:
    """A many-step trace of at least target_bytes (uncompressed): each step runs compute on
    stream 7 and, half overlapped, NCCL on stream 20 (with collective args when `nelems`).
    Written incrementally."""
    path = Path(path)

    def step_kernels(step: int) -> list[Kernel]:
        t0 = step * kernels_per_step * 12.0
        ks = [Kernel(step, 7, t0 + 10.0 * i, 9.0) for i in range(kernels_per_step)]
        ks += [
            nccl(step, 20, t0 + 20.0 * i + 5.0, 10.0, nelems=nelems)
            for i in range(kernels_per_step // 4)
        ]
        return ks

    class Counting:
        def __init__(self, fh: IO[str]) -> None:
            self.fh, self.n = fh, 0

        def write(self, s: str) -> None:
            self.n += len(s)
            self.fh.write(s)

    with _open(path) as raw:
        out = Counting(raw)

        def batches() -> Iterator[Iterator[dict[str, Any]]]:
            step, corr = 0, 1
            while out.n < target_bytes:
                ks = step_kernels(step)
                yield _events(ks, first_correlation=corr)
                corr += len(ks)
                step += 1

        _write(out, batches(), rank, 1)  # type: ignore[arg-type]
    return path
