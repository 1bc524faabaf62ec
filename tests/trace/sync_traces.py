"""Hand-built GPU traces with CUDA sync events, in Kineto's layout (for the critical path).

Each device operation is launched from the main thread in the order given, one runtime call
per operation with its own correlation id: a kernel (`cudaLaunchKernel`), an event record
on a stream (`cudaEventRecord`), a stream's wait on the last recorded event of another
stream (`cudaStreamWaitEvent`, with Kineto's `cuda_sync` "Stream Wait Event" on the waiting
stream's lane), or a host synchronisation with a stream (`cudaStreamSynchronize`, with a
"Stream Sync" event). `sync_events=False` leaves the `cuda_sync` events out, as a trace
captured without `enable_cuda_sync_events` has none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

CPU_PID, CPU_TID, DEVICE = 1000, 1000, 0
GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn"
CAST = "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda>"
REDUCE_SCATTER = (
    "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
)


class Op(NamedTuple):
    kind: str  # 'kernel', 'record', 'wait', 'sync', or 'cpu' (an operator on the host alone)
    stream: int
    launch: float  # host time of the runtime call
    start: float = 0.0  # kernels: device start
    dur: float = 0.0  # kernels: device duration; sync: how long the host call blocks
    name: str = GEMM
    wait_on: int = -1  # 'wait': the stream whose last recorded event is waited for
    annotation: str = ""  # a range around the launch (an engine's, say)


_CALLS = {"kernel": "cudaLaunchKernel", "record": "cudaEventRecord",
          "wait": "cudaStreamWaitEvent", "sync": "cudaStreamSynchronize"}  # fmt: skip


def _x(cat: str, name: str, pid: int, tid: int, ts: float, dur: float, **args: Any) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def sync_trace_events(ops: list[Op], step: tuple[float, float], *, sync_events: bool = True):
    events = [_x("user_annotation", "ProfilerStep#1", CPU_PID, CPU_TID, step[0], step[1] - step[0])]
    last_record: dict[int, int] = {}
    for corr, op in enumerate(ops, start=1):
        if op.kind == "cpu":
            events.append(_x("cpu_op", op.name, CPU_PID, CPU_TID, op.launch, op.dur))
            continue
        host_dur = op.dur if op.kind == "sync" else 0.5
        if op.annotation:
            events.append(_x("user_annotation", op.annotation, CPU_PID, CPU_TID,
                             op.launch - 0.1, host_dur + 0.2))  # fmt: skip
        events.append(_x("cuda_runtime", _CALLS[op.kind], CPU_PID, CPU_TID, op.launch,
                         host_dur, correlation=corr))  # fmt: skip
        if op.kind == "kernel":
            cat = "kernel"
            events.append(_x(cat, op.name, DEVICE, op.stream, op.start, op.dur, device=DEVICE,
                             stream=op.stream, correlation=corr))  # fmt: skip
        elif op.kind == "record":
            last_record[op.stream] = corr
        elif op.kind == "wait" and sync_events:
            events.append(_x("cuda_sync", "Stream Wait Event", DEVICE, op.stream, op.launch + 0.2,
                             0.0, cuda_sync_kind="Stream Wait Event", stream=op.stream,
                             wait_on_stream=op.wait_on,
                             wait_on_cuda_event_record_corr_id=last_record[op.wait_on],
                             correlation=corr))  # fmt: skip
        elif op.kind == "sync" and sync_events:
            events.append(_x("cuda_sync", "Stream Sync", DEVICE, op.stream, op.launch + op.dur - 1,
                             1.0, cuda_sync_kind="Stream Sync", stream=op.stream,
                             correlation=corr))  # fmt: skip
    return events


def write_sync_trace(path: Path, ops: list[Op], step: tuple[float, float], *, rank: int = 0,
                     world_size: int = 1, sync_events: bool = True) -> Path:  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    trace = {
        "schemaVersion": 1,
        "deviceProperties": [],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size},
        "traceEvents": sync_trace_events(ops, step, sync_events=sync_events),
    }
    path.write_text(json.dumps(trace))
    return path


def give_way_ops() -> list[Op]:
    """A reduce-scatter made late by a chain of side-stream kernels waiting behind GEMMs:
    three GEMMs on stream 7 (0-300 us after 20), two cast kernels on stream 13 that wait for
    the third GEMM, the reduce-scatter on stream 20 that waits for the casts, and one more
    GEMM that waits for the reduce-scatter; the host launches everything at once, then
    synchronises. The step runs from 20 to 600 us."""
    hook = "FullyShardedDataParallel._post_backward_hook"
    return [
        Op("kernel", 7, 1.0, 20.0, 100.0),
        Op("kernel", 7, 2.0, 120.0, 100.0),
        Op("kernel", 7, 3.0, 220.0, 100.0),
        Op("record", 7, 4.0),
        Op("wait", 13, 5.0, wait_on=7, annotation=hook),
        Op("kernel", 13, 6.0, 320.0, 60.0, CAST, annotation=hook),
        Op("kernel", 13, 7.0, 380.0, 60.0, CAST, annotation=hook),
        Op("record", 13, 8.0),
        Op("wait", 20, 9.0, wait_on=13),
        Op("kernel", 20, 10.0, 440.0, 100.0, REDUCE_SCATTER),
        Op("record", 20, 11.0),
        Op("wait", 7, 12.0, wait_on=20),
        Op("kernel", 7, 13.0, 540.0, 60.0),
        Op("sync", 7, 14.0, dur=587.0),  # returns at 601, 1 us after the last GEMM
    ]
