"""The one-GPU measurements behind suite S (`suite_s/__init__.py`): CUDA only, no network.

Each function returns plain numbers (or samples); the suite judges them and writes them
into the calibration file. Shapes are the published models' (Llama 2 34B's backward GEMMs,
70B-wide units), scaled only in element counts where a whole unit would not add anything.
"""

from __future__ import annotations

import gc
import json
import random
import tempfile
from pathlib import Path
from typing import Any

import torch

# Llama 2 34B's largest backward GEMM at seq 2048 (the MLP's [T, d] x [d, ffn]).
GEMM_SHAPE = (2048, 8192, 22016)
GEMMS_PER_TRIAL = 6
ELEMENTS = 64 * 2**20  # a side kernel's operand: 64 Mi elements (a block's gradient is ~10x)
# FSDP1 hooks as torch names them (torch/distributed/fsdp/_runtime_utils.py record_function)
HOOKS = ("FullyShardedDataParallel._pre_forward", "FullyShardedDataParallel._post_forward",
         "FullyShardedDataParallel._pre_backward_hook",
         "FullyShardedDataParallel._post_backward_hook")  # fmt: skip
LIMITER = "FullyShardedDataParallel.rate_limiter"


def _elapsed_ms(a: torch.cuda.Event, b: torch.cuda.Event) -> float:
    return float(a.elapsed_time(b))


def _gemms(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    m, k, n = GEMM_SHAPE
    return (torch.randn(m, k, device=device, dtype=torch.bfloat16),
            torch.randn(k, n, device=device, dtype=torch.bfloat16))  # fmt: skip


def gemm_ms(device: torch.device) -> float:
    """One GEMM alone, median of 10."""
    a, b = _gemms(device)
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        e.synchronize()
        times.append(_elapsed_ms(s, e))
    return sorted(times)[len(times) // 2]


def _chain(x: torch.Tensor, links: int) -> None:
    """FSDP1's chain stand-in: the cast to fp32, then divides (each one kernel)."""
    y = x.float()
    for _ in range(links - 1):
        y.div_(2.0)


def chain_latencies(device: torch.device, trials: int, links: int, priority: int = 0
                    ) -> tuple[list[float], float]:  # fmt: skip
    """Ready-to-done latency (ms) of a `links`-kernel chain on a side stream of `priority`,
    made ready at a random moment while the compute stream runs back-to-back GEMMs; and
    the same chain's latency alone."""
    a, b = _gemms(device)
    x = torch.randn(ELEMENTS, device=device, dtype=torch.bfloat16)
    side = torch.cuda.Stream(device, priority=priority)
    trigger = torch.cuda.Stream(device)
    alone = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(side):
            s.record()
            _chain(x, links)
            e.record()
        e.synchronize()
        alone.append(_elapsed_ms(s, e))
    out = []
    for _ in range(trials):
        ready = torch.cuda.Event()
        with torch.cuda.stream(trigger):
            torch.cuda._sleep(random.randint(10_000, 2_000_000))  # a random phase
            ready.record()
        for _ in range(GEMMS_PER_TRIAL):
            a @ b
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(side):
            side.wait_event(ready)
            s.record()
            _chain(x, links)
            e.record()
        torch.cuda.synchronize(device)
        out.append(_elapsed_ms(s, e))
    return out, sorted(alone)[len(alone) // 2]


def v1_copy(device: torch.device) -> dict[str, float]:
    """YaFSDP v1's bf16->fp32 copy on a -1 stream beside GEMMs: its latency there and
    alone, and how long a priority-0 kernel made ready by it then waits."""
    a, b = _gemms(device)
    x = torch.randn(ELEMENTS, device=device, dtype=torch.bfloat16)
    y = torch.empty(ELEMENTS, device=device, dtype=torch.float32)
    high, low = torch.cuda.Stream(device, priority=-1), torch.cuda.Stream(device, priority=0)
    stretched: list[float] = []
    alone: list[float] = []
    waits: list[float] = []
    for beside in (False, True) * 20:
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        if beside:
            for _ in range(GEMMS_PER_TRIAL):
                a @ b
        with torch.cuda.stream(high):
            torch.cuda._sleep(random.randint(10_000, 500_000))
            ev[0].record()
            y.copy_(x)
            ev[1].record()
        with torch.cuda.stream(low):  # the reduce-scatter stand-in at priority 0
            low.wait_event(ev[1])
            ev[2].record()
            y.mul_(1.0)
            ev[3].record()
        torch.cuda.synchronize(device)
        (stretched if beside else alone).append(_elapsed_ms(ev[0], ev[1]))
        if beside:
            waits.append(_elapsed_ms(ev[1], ev[3]))
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    return {"copy_ms_beside_gemms": med(stretched), "copy_ms_alone": med(alone),
            "priority0_ms_after_copy": med(waits)}  # fmt: skip


def bandwidth(device: torch.device) -> dict[str, float]:
    """GB/s of the cast, the divide and a cat, alone (median of 10)."""
    x = torch.randn(ELEMENTS, device=device, dtype=torch.bfloat16)
    f = torch.empty(ELEMENTS, device=device, dtype=torch.float32)
    pieces = list(x.chunk(8))
    kernels = {"cast": (lambda: f.copy_(x), 6 * ELEMENTS),
               "divide": (lambda: f.div_(2.0), 8 * ELEMENTS),
               "cat": (lambda: torch.cat(pieces), 4 * ELEMENTS)}  # fmt: skip
    out = {}
    for name, (run, nbytes) in kernels.items():
        times = []
        for _ in range(10):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            run()
            e.record()
            e.synchronize()
            times.append(_elapsed_ms(s, e))
        out[f"{name}_gbps"] = nbytes / (sorted(times)[5] * 1e-3) / 1e9
    return out


def fsdp1_trace(device: torch.device, model: str = "llama2_7b", layers: int = 4,
                seq_len: int = 2048) -> dict[str, Any]:  # fmt: skip
    """FSDP1 (the published settings) on one GPU under the fake process group: one
    profiled step's kernels (name, stream, µs) and hook spans, and the streams FSDP made."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from harness.gpucheck.training import build, train_step

    shape = _layers(model, layers)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    try:
        trainee = build("fsdp1", shape, rank=0, world_size=8, device=device, seq_len=seq_len)
        train_step(trainee, 0)
        torch.cuda.synchronize(device)
        unshard = _fsdp_unshard_stream(trainee)
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        ) as prof:
            with torch.cuda.stream(unshard):
                torch.cuda._sleep(1000)  # names the unshard stream in the trace
            train_step(trainee, 1)
            torch.cuda.synchronize(device)
        trace = _chrome_events(prof)
        numels = [h.flat_param.numel() for h in _fsdp_handles(trainee)]
        del trainee
        return {"events": trace, "flat_param_numels": numels, "units": len(numels)}
    finally:
        dist.destroy_process_group()
        gc.collect()
        torch.cuda.empty_cache()


def _layers(model: str, layers: int) -> Any:
    """The preset's shape with fewer layers (the units' widths are what matter here)."""
    from dataclasses import replace

    from harness.models.shapes import get_shape

    return replace(get_shape(model), n_layers=layers)


def _fsdp_modules(trainee: Any) -> list[Any]:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    return FSDP.fsdp_modules(trainee.wrapped.module)


def _fsdp_unshard_stream(trainee: Any) -> torch.cuda.Stream:
    return _fsdp_modules(trainee)[0]._unshard_stream


def _fsdp_handles(trainee: Any) -> list[Any]:
    return [m._handle for m in _fsdp_modules(trainee) if m._handle is not None]


def _chrome_events(prof: Any) -> list[dict[str, Any]]:
    """The profile's events as its Chrome trace holds them (the kernels' streams are there)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        data = json.loads(path.read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [
        {"name": e.get("name", ""), "cat": e.get("cat", ""), "ts": e.get("ts", 0.0),
         "dur": e.get("dur", 0.0), "stream": (e.get("args") or {}).get("stream")}
        for e in events if e.get("ph") == "X"
    ]  # fmt: skip


def allocator_retries(device: torch.device, cap_gib: float = 80.0, model: str = "llama3_70b",
                      layers: int = 80, ckpt_layers: int = 20, seq_len: int = 2048,
                      world_size: int = 256) -> dict[str, Any]:  # fmt: skip
    """FSDP1 at the published llama3_70b/256/2048 point (20 layers checkpointed) on its
    last rank, the process capped at `cap_gib` GiB: the caching allocator's retries over
    two steps (an out-of-memory is a finding: `oom` true)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from harness.gpucheck.training import build, train_step

    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap_gib * 2**30 / total), device)
    shape = _layers(model, layers)
    dist.init_process_group("fake", store=FakeStore(), rank=world_size - 1,
                            world_size=world_size)  # fmt: skip
    try:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_accumulated_memory_stats(device)
        trainee = build("fsdp1", shape, rank=world_size - 1, world_size=world_size,
                        device=device, seq_len=seq_len, ckpt_layers=ckpt_layers)  # fmt: skip
        oom = False
        try:
            for step in range(2):
                train_step(trainee, step)
            torch.cuda.synchronize(device)
        except torch.OutOfMemoryError:
            oom = True
        stats = torch.cuda.memory_stats(device)
        del trainee
        return {"num_alloc_retries": int(stats.get("num_alloc_retries", 0)), "oom": oom,
                "reserved_gib": stats.get("reserved_bytes.all.peak", 0) / 2**30,
                "allocated_gib": stats.get("allocated_bytes.all.peak", 0) / 2**30,
                "layers": layers, "ckpt_layers": ckpt_layers, "cap_gib": cap_gib}  # fmt: skip
    finally:
        dist.destroy_process_group()
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        gc.collect()
        torch.cuda.empty_cache()
