"""Suite A: one GPU, NCCL, world size 1: the engine's real communication stream.

1 parity with the unsharded reference; 2 stream ordering under stress; 3 no hidden host
syncs; 4 no engine allocation above a scalar in steady state, and memory_report() equal to
what the allocator's snapshot attributes to the engine; 5 a real CUDA trace through harness.trace
and HolisticTraceAnalysis; 6 overlap made visible by an injected communication delay.
Only a GPU can prove these; tests/gpucheck exercises their wrappers on CPU with gloo.
"""

from __future__ import annotations

import functools
import inspect
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from harness.gpucheck import judging as delay_model
from harness.gpucheck.check_rows import Check, Verdict, run_check
from harness.gpucheck.judging import Trace, compare, engine_frame, frames_of, steady_offenders
from harness.gpucheck.stress import (
    cycles_per_second,
    delayed_forward_gathers,
    poisoned_collectives,
    slow_guarded_writes,
    yafsdp_of,
)
from harness.gpucheck.trace_check import TRACE_HTA, TRACE_STEPS, trace_checks
from harness.gpucheck.training import (
    build,
    release_cuda_memory,
    train_step,
)
from harness.models.build import decoder_parts
from harness.models.shapes import ModelShape, get_shape
from harness.rank.session import Session
from yafsdp_impl import Buffers, held_bytes

SMALL = "llama_mini"
# The engine file that allocates every tensor `memory_report` counts.
BUFFERS_FILE = Path(inspect.getsourcefile(Buffers) or "").name
# Llama 2 7B's layer shape with 6 layers: each unit's compute is milliseconds on one GPU,
# long enough that kernel launches do not hide it, small enough to build in seconds.
PROBE = ModelShape(
    name="probe_7b_layers", dim=4096, n_layers=6, n_heads=32, n_kv_heads=32,
    ffn_dim=11008, vocab_size=32000,
)  # fmt: skip
PROBE_SEQ = 2048
STEPS = 3
# Same model, data and kernels: fp32 losses agree to reduction order, bf16 to rounding
# of differently grouped reductions (the CPU parity test's bounds).
RTOL = {"fp32": 1e-5, "bf16": 1e-3}
STRESS_SLEEP_S = 2e-3  # per collective and per guarded write: far longer than any of them


@contextmanager
def nccl_world() -> Iterator[torch.device]:
    """A one-rank NCCL process group on GPU 0."""
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield torch.device("cuda", 0)
    finally:
        dist.destroy_process_group()


def losses(t: Session, steps: int = STEPS) -> list[float]:
    out = [train_step(t, s) for s in range(steps)]
    return [float(x) for x in torch.stack(out).tolist()]


def _close(a: list[float], b: list[float], rtol: float) -> bool:
    return all(abs(x - y) <= rtol * abs(y) for x, y in zip(a, b, strict=True))


# ---- 1 ---------------------------------------------------------------------------------


def steps_trace(t: Session, steps: int = STEPS) -> Trace:
    """Each step's loss and gradient norm before clipping (read once, after the steps)."""
    out = [t.step(s) for s in range(steps)]
    losses = [float(x) for x in torch.stack([loss for loss, _ in out]).tolist()]
    norms = [float(n) for _, n in out if n is not None]
    return Trace(losses, norms)


def parity_verdict(
    make: Callable[[str, str], Session], dtypes: tuple[str, ...] = ("fp32", "bf16")
) -> Verdict:
    """yafsdp against local in each dtype: losses and gradient norms, step by step."""
    figures: dict[str, Any] = {}
    bad = []
    for dtype in dtypes:
        got = {label: steps_trace(make(label, dtype)) for label in ("local", "yafsdp")}
        found, problem = compare(dtype, got["yafsdp"], got["local"], RTOL[dtype])
        figures |= found
        figures[f"{dtype}_final_loss"] = round(got["local"].losses[-1], 5)
        if problem:
            bad.append(problem)
    return Verdict(not bad, figures, "; ".join(bad))


def check_parity(device: torch.device) -> Verdict:
    shape = get_shape(SMALL)
    return parity_verdict(
        lambda label, dtype: build(
            label,
            shape,
            rank=0,
            world_size=1,
            device=device,
            dtype=dtype,
            ckpt_layers=shape.n_layers,
            grad_accum=2,
            seq_len=256,
        )  # fmt: skip
    )


# ---- 2 ---------------------------------------------------------------------------------


def check_ordering(device: torch.device) -> Verdict:
    shape = get_shape(SMALL)
    cycles = int(STRESS_SLEEP_S * cycles_per_second(device))
    make = lambda: build(  # noqa: E731
        "yafsdp", shape, rank=0, world_size=1, device=device, dtype="bf16",
        ckpt_layers=2, grad_accum=2, seq_len=256,
    )  # fmt: skip
    calm = losses(make())
    stressed_t = make()
    slow_guarded_writes(yafsdp_of(stressed_t), cycles)
    with poisoned_collectives(cycles):
        stressed = losses(stressed_t)
    figures = {"sleep_ms": STRESS_SLEEP_S * 1e3, "calm": calm, "stressed": stressed}
    finite = all(x == x for x in stressed)
    # Same engine and kernels; bf16 attention backward is not deterministic on GPU, so
    # the bound is the bf16 parity one. A read of a poisoned buffer gives NaN.
    ok = finite and _close(stressed, calm, RTOL["bf16"])
    return Verdict(ok, figures, "" if ok else "losses under stress differ from the calm run")


# ---- 3 ---------------------------------------------------------------------------------


def check_no_syncs(device: torch.device) -> Verdict:
    t = build(
        "yafsdp", get_shape(SMALL), rank=0, world_size=1, device=device, dtype="bf16",
        ckpt_layers=2, grad_accum=2, seq_len=256,
    )  # fmt: skip
    train_step(t, 0)  # lazy initialisation happens outside the guarded region
    data = t.batches(1)
    torch.cuda.synchronize(device)
    torch.cuda.set_sync_debug_mode("error")
    try:
        t.forward_backward(lambda micro: data[micro])
    except RuntimeError as e:
        return Verdict(False, {}, f"host sync in forward/backward: {str(e).splitlines()[0]}")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    t.optimizer_step()
    return Verdict(True, {"micro_batches": t.cfg.grad_accum})


# ---- 4 ---------------------------------------------------------------------------------


def check_steady_state_memory(device: torch.device) -> Verdict:
    history = torch.cuda.memory._record_memory_history
    history(enabled="all", context="all", stacks="python")
    try:
        t = build(
            "yafsdp", get_shape(SMALL), rank=0, world_size=1, device=device, dtype="bf16",
            ckpt_layers=2, grad_accum=2, seq_len=256,
        )  # fmt: skip
        train_step(t, 0)
        torch.cuda.synchronize(device)
        index = torch.cuda.current_device()
        before = len(torch.cuda.memory._snapshot()["device_traces"][index])
        train_step(t, 1)
        train_step(t, 2)
        torch.cuda.synchronize(device)
        snap = torch.cuda.memory._snapshot()
    finally:
        history(enabled=None)
    trace = snap["device_traces"][index][before:]
    steady = [e for e in trace if e.get("action") == "alloc"]
    by_engine = [engine_frame(frames_of(e)) for e in steady]
    offenders = steady_offenders(trace)
    live = [
        b
        for seg in snap["segments"]
        for b in seg["blocks"]
        if b.get("state") == "active_allocated"
        and (engine_frame(frames_of(b)) or "").startswith(f"{BUFFERS_FILE}:")
    ]
    attributed = sum(int(b.get("requested_size", b["size"])) for b in live)
    reported = held_bytes(yafsdp_of(t).memory_report())
    figures = {
        "steady_allocs_total": len(steady),
        "steady_allocs_by_engine": sum(1 for f in by_engine if f),
        "snapshot_engine_mib": round(attributed / 2**20, 3),
        "memory_report_mib": round(reported / 2**20, 3),
    }
    problems = []
    if offenders:
        problems.append(f"engine allocates in steady state at {', '.join(offenders[:5])}")
    if attributed != reported:
        problems.append(
            f"snapshot attributes {attributed} B to {BUFFERS_FILE}, report {reported} B"
        )
    return Verdict(not problems, figures, "; ".join(problems))


# ---- 5 and 6: the probe model ------------------------------------------------------------


def build_probe(device: torch.device) -> Session:
    return build(
        "yafsdp", PROBE, rank=0, world_size=1, device=device, dtype="bf16", seq_len=PROBE_SEQ
    )


def unit_forward_times(t: Session, steps: int = 3) -> list[float]:
    """Median forward compute of each unit (embedding, layers, output), in seconds."""
    parts = decoder_parts(t.wrapped.module)
    units = [parts.embed, *parts.layers, parts.head]
    samples: list[list[tuple[torch.cuda.Event, torch.cuda.Event]]] = [[] for _ in units]
    handles = []
    for i, unit in enumerate(units):

        def pre(_m, _a, i=i) -> None:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            samples[i].append((ev, ev))

        def post(_m, _a, _o, i=i) -> None:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            samples[i][-1] = (samples[i][-1][0], ev)

        handles += [unit.register_forward_pre_hook(pre), unit.register_forward_hook(post)]
    try:
        for s in range(steps):
            train_step(t, 200 + s)
        torch.cuda.synchronize()
    finally:
        for h in handles:
            h.remove()
    return [statistics.median(a.elapsed_time(b) / 1e3 for a, b in s) for s in samples]


def median_step_s(t: Session, steps: int = 5, first: int = 300) -> float:
    times = []
    for s in range(steps + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        train_step(t, first + s)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def check_delay(t: Session, device: torch.device) -> Verdict:
    rate = cycles_per_second(device)
    forward = unit_forward_times(t)
    unit = statistics.median(forward[1:-1])  # a transformer layer's forward
    hiding = delay_model.forward_hiding(forward)
    base = median_step_s(t)
    figures: dict[str, Any] = {
        "layer_fwd_ms": round(unit * 1e3, 3),
        "step_ms": round(base * 1e3, 2),
    }
    problems = []
    for factor in (1.0, 2.0):
        delay = factor * unit
        with delayed_forward_gathers(int(delay * rate)):
            grown = median_step_s(t) - base
        expected = delay_model.overlapped_growth(delay, hiding)
        serial = delay_model.serial_growth(delay, len(hiding))
        key = f"d{factor:g}x"
        figures |= {
            f"{key}_growth_ms": round(grown * 1e3, 3),
            f"{key}_model_ms": round(expected * 1e3, 3),
            f"{key}_serial_ms": round(serial * 1e3, 3),
        }
        if not delay_model.judge(grown, expected, serial):
            problems.append(
                f"delay {factor:g}x a layer: grew {grown * 1e3:.2f} ms, overlap model "
                f"{expected * 1e3:.2f} ms, serial {serial * 1e3:.2f} ms"
            )
    return Verdict(not problems, figures, "; ".join(problems))


# ---- the suite ---------------------------------------------------------------------------

CHECKS: list[tuple[str, str, Callable[[torch.device], Verdict]]] = [
    ("1 parity", "yafsdp equals local in losses and gradient norms, fp32 and bf16, every "
     "layer checkpointed, grad_accum=2, on NCCL", check_parity),
    ("2 ordering", "compute waits for comm (NaN-poisoned, delayed collectives) and comm "
     "waits for compute (delayed writes to the bf16 master copy and staging)", check_ordering),
    ("3 no host syncs", "forward and backward run under set_sync_debug_mode('error')",
     check_no_syncs),
    ("4 steady memory", "no engine allocation above a scalar in steps 2-3; memory_report() "
     "equals the snapshot's bytes allocated in yafsdp_impl/_buffers.py", check_steady_state_memory),
]  # fmt: skip
DELAY = (
    "6 injected delay",
    "a forward comm delay of 1x and 2x a layer's compute grows the step by "
    "sum(max(0, delay - compute hidden behind)), not by the serial sum",
)
# Every row the suite writes, for the table of a machine that cannot run it.
NAMES = [(n, p) for n, p, _ in CHECKS] + [TRACE_STEPS, TRACE_HTA, DELAY]


# Suite A's work, for its estimate (harness.gpucheck.schedule): 1 the parity builds 4
# sessions, 2 two, 3 and 4 one each; 5 profiles 1 + 2 steps, 6 times 3 units' forward
# steps and 3 x 6 steps.
WORK = {"process group": 1, "small build": 8, "probe build": 1, "probe step": 3 + 3 + 18}


def run(on_row: Callable[[Check], None] = lambda row: None) -> list[Check]:
    """Every check in order; `on_row` is told of each row as it is done."""
    rows: list[Check] = []

    def add(row: Check) -> None:
        rows.append(row)
        on_row(row)

    with nccl_world() as device:
        for name, proves, fn in CHECKS:
            add(run_check("A", name, proves, functools.partial(fn, device)))
            release_cuda_memory()
        built: list[Session] = []

        def probe() -> Session:  # built once, for 5 and 6
            if not built:
                built.append(build_probe(device))
            return built[0]

        for row in trace_checks(probe, device):
            add(row)
        add(run_check("A", *DELAY, lambda: check_delay(probe(), device)))
        built.clear()
        release_cuda_memory()
    return rows
