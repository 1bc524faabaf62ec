"""Suite A: one GPU, NCCL, world size 1: the engine's real communication stream.

1 parity with the unsharded reference; 2 stream ordering under stress; 3 no hidden host
syncs; 4 no engine allocations in steady state, and memory_report() equal to what the
allocator's snapshot attributes to the engine; 5 a real CUDA trace through harness.trace
and HolisticTraceAnalysis; 6 overlap made visible by an injected communication delay.
Only a GPU can run these; nothing here is exercised on CPU.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from harness.gpucheck import delay_model
from harness.gpucheck.outcome import Check, Verdict, run_check, skipped
from harness.gpucheck.training import (
    Trainee,
    batches,
    build,
    forward_backward,
    optimizer_step,
    train_step,
)
from harness.models.shapes import ModelShape, get_shape
from yafsdp_impl import collectives

SMALL = "llama_mini"
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
ENGINE_FILES = "yafsdp_impl"
MODEL_COMPUTE = {"__call__", "_checkpointed"}  # engine frames that run the user's forward


@contextmanager
def nccl_world() -> Iterator[torch.device]:
    """A one-rank NCCL process group on GPU 0."""
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield torch.device("cuda", 0)
    finally:
        dist.destroy_process_group()


def losses(t: Trainee, steps: int = STEPS) -> list[float]:
    out = [train_step(t, s) for s in range(steps)]
    return [float(x) for x in torch.stack(out).tolist()]


def _close(a: list[float], b: list[float], rtol: float) -> bool:
    return all(abs(x - y) <= rtol * abs(y) for x, y in zip(a, b, strict=True))


def cycles_per_second(device: torch.device) -> float:
    """What `torch.cuda._sleep(cycles)` spins per second on this GPU (clock-dependent)."""
    cycles = 50_000_000
    torch.cuda._sleep(cycles // 10)  # wake the clocks
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize(device)
    return cycles / (start.elapsed_time(end) / 1e3)


# ---- 1 ---------------------------------------------------------------------------------


def check_parity(device: torch.device) -> Verdict:
    shape = get_shape(SMALL)
    figures: dict[str, Any] = {}
    bad = []
    for dtype in ("fp32", "bf16"):
        got = {}
        for label in ("local", "yafsdp"):
            t = build(
                label, shape, rank=0, world_size=1, device=device, dtype=dtype,
                ckpt_layers=shape.n_layers, grad_accum=2, seq_len=256,
            )  # fmt: skip
            got[label] = losses(t)
        diff = max(abs(a - b) / abs(b) for a, b in zip(got["yafsdp"], got["local"], strict=True))
        figures[f"{dtype}_max_rel_diff"] = diff
        figures[f"{dtype}_final_loss"] = round(got["local"][-1], 5)
        if not _close(got["yafsdp"], got["local"], RTOL[dtype]):
            bad.append(f"{dtype}: yafsdp {got['yafsdp']} vs local {got['local']}")
    return Verdict(not bad, figures, "; ".join(bad))


# ---- 2 ---------------------------------------------------------------------------------


@contextmanager
def poisoned_collectives(sleep_cycles: int) -> Iterator[None]:
    """Every all-gather and reduce-scatter first fills its output with NaN and sleeps on
    the communication stream, then runs: compute that does not wait for it reads NaN."""
    gather, scatter = collectives.all_gather, collectives.reduce_scatter

    def slow_gather(out, shard, group, async_op):
        out.fill_(float("nan"))
        torch.cuda._sleep(sleep_cycles)
        return gather(out, shard, group, async_op)

    def slow_scatter(out, full, group, rank, world_size, async_op):
        if out is not None:
            out.fill_(float("nan"))
        torch.cuda._sleep(sleep_cycles)
        return scatter(out, full, group, rank, world_size, async_op)

    collectives.all_gather, collectives.reduce_scatter = slow_gather, slow_scatter
    try:
        yield
    finally:
        collectives.all_gather, collectives.reduce_scatter = gather, scatter


def slow_guarded_writes(engine: Any, sleep_cycles: int) -> None:
    """Before the compute stream writes the low-precision master copy and the staging
    buffer (both read by collectives), fill them with NaN and sleep: a collective that
    does not wait for those writes gathers or reduces NaN."""
    copy_lowp, reduce_scatter = engine._copy_master_to_lowp, engine._reduce_scatter
    b = engine.buffers

    def slow_copy() -> None:
        if b.lowp is not b.master:  # with fp32 weights the gathers read the master itself
            b.lowp.fill_(float("nan"))
            b.resident_lowp.fill_(float("nan"))
        torch.cuda._sleep(sleep_cycles)
        copy_lowp()

    def slow_reduce_scatter(i: int) -> None:
        engine._fold(resident=False)  # the previous reduce-scatter has finished reading
        b.staging.fill_(float("nan"))
        torch.cuda._sleep(sleep_cycles)
        reduce_scatter(i)

    engine._copy_master_to_lowp, engine._reduce_scatter = slow_copy, slow_reduce_scatter


def _yafsdp_of(t: Trainee) -> Any:
    """The YaFSDP object behind the adapter (its memory_report is a bound method)."""
    return t.wrapped.memory_breakdown.__self__


def check_ordering(device: torch.device) -> Verdict:
    shape = get_shape(SMALL)
    cycles = int(STRESS_SLEEP_S * cycles_per_second(device))
    make = lambda: build(  # noqa: E731
        "yafsdp", shape, rank=0, world_size=1, device=device, dtype="bf16",
        ckpt_layers=2, grad_accum=2, seq_len=256,
    )  # fmt: skip
    calm = losses(make())
    stressed_t = make()
    slow_guarded_writes(_yafsdp_of(stressed_t), cycles)
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
    data = batches(t, 1)
    torch.cuda.synchronize(device)
    torch.cuda.set_sync_debug_mode("error")
    try:
        forward_backward(t, data)
    except RuntimeError as e:
        return Verdict(False, {}, f"host sync in forward/backward: {str(e).splitlines()[0]}")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    optimizer_step(t)
    return Verdict(True, {"micro_batches": t.grad_accum})


# ---- 4 ---------------------------------------------------------------------------------


def _frames(entry: dict[str, Any]) -> list[dict[str, Any]]:
    frames = entry.get("frames")
    if frames is None and entry.get("history"):
        frames = entry["history"][-1].get("frames")
    return frames or []


def engine_frame(frames: list[dict[str, Any]]) -> str | None:
    """The engine function that made an allocation, or None when it is model compute or
    not the engine's at all. Frames run innermost first, as the snapshot records them."""
    for f in frames:
        filename = str(f.get("filename", ""))
        if "harness/models" in filename:
            return None  # model code nearer the allocation than any engine frame
        if ENGINE_FILES in filename:
            name = str(f.get("name", ""))
            return None if name in MODEL_COMPUTE else f"{Path(filename).name}:{name}"
    return None


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
    steady = [e for e in snap["device_traces"][index][before:] if e.get("action") == "alloc"]
    by_engine = [engine_frame(_frames(e)) for e in steady]
    offenders = sorted({f for f in by_engine if f})
    live = [
        b
        for seg in snap["segments"]
        for b in seg["blocks"]
        if b.get("state") == "active_allocated"
        and (engine_frame(_frames(b)) or "").startswith("buffers.py")
    ]
    attributed = sum(int(b.get("requested_size", b["size"])) for b in live)
    reported = sum(_yafsdp_of(t).memory_report().values())
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
        problems.append(f"snapshot attributes {attributed} B to buffers.py, report {reported} B")
    return Verdict(not problems, figures, "; ".join(problems))


# ---- 5 and 6: the probe model ------------------------------------------------------------


def build_probe(device: torch.device) -> Trainee:
    return build(
        "yafsdp", PROBE, rank=0, world_size=1, device=device, dtype="bf16", seq_len=PROBE_SEQ
    )


def capture_trace(t: Trainee, device: torch.device) -> dict[str, Any]:
    """Profile two steps of `t`; our per-step analysis, and HTA's overlap when the trace
    holds communication kernels (a one-rank NCCL group copies instead of launching one)."""
    from harness.profiling import capture_profile
    from harness.trace import summarize_trace
    from harness.trace.parse import load_trace

    def step(i: int) -> None:
        train_step(t, 100 + i)
        torch.cuda.synchronize(device)

    with tempfile.TemporaryDirectory() as tmp:
        path = capture_profile(
            step, steps=2, warmup=1, out_dir=Path(tmp), rank=0, world_size=1, use_cuda=True
        )
        assert path is not None
        events = load_trace(path).events
        device_events = events[events["stream"].to_numpy() >= 0]
        summary = summarize_trace(path)["summary"]
        out: dict[str, Any] = {
            "device_events": len(device_events),
            "without_step": int((device_events["step"].to_numpy() < 0).sum()),
            "comm_ms_per_step": round(summary["comm_s_per_step"] * 1e3, 3),
            "compute_ms_per_step": round(summary["compute_s_per_step"] * 1e3, 3),
            "overlap_pct_ours": summary["overlap_pct"],
        }
        if summary["overlap_pct"] is not None:
            try:
                from hta.trace_analysis import TraceAnalysis
            except ImportError as e:
                out["hta_missing"] = (
                    f"HolisticTraceAnalysis is not importable ({e}): make gpu-wheels"
                )
                return out
            df = TraceAnalysis(
                trace_dir=str(path.parent), include_last_profiler_step=True
            ).get_comm_comp_overlap(visualize=False)
            out["overlap_pct_hta"] = float(df["comp_comm_overlap_pctg"].iloc[0])
    return out


TRACE_STEPS = ("5a trace steps", "every device event of a real CUDA trace falls in a profiler step")
TRACE_HTA = (
    "5b overlap vs HTA",
    "our overlap % on a real CUDA trace equals HTA's get_comm_comp_overlap within 0.5 points",
)


def trace_checks(probe: Callable[[], Trainee], device: torch.device) -> list[Check]:
    data: dict[str, Any] = {}

    def steps() -> Verdict:
        data.update(capture_trace(probe(), device))
        figures = {k: data[k] for k in ("device_events", "without_step", "compute_ms_per_step")}
        ok = data["without_step"] == 0 and data["device_events"] > 0
        detail = "" if ok else f"{data['without_step']} device events are in no profiler step"
        return Verdict(ok, figures, detail)

    def overlap() -> Verdict:
        if "hta_missing" in data:
            return Verdict(False, {}, data["hta_missing"])
        ours, theirs = data["overlap_pct_ours"], data["overlap_pct_hta"]
        figures = {"overlap_pct_ours": ours, "overlap_pct_hta": theirs}
        figures["comm_ms_per_step"] = data["comm_ms_per_step"]
        ok = abs(ours - theirs) <= 0.5
        return Verdict(ok, figures, "" if ok else "more than 0.5 points apart")

    rows = [run_check("A", *TRACE_STEPS, steps)]
    if "device_events" not in data:
        rows.append(skipped("A", *TRACE_HTA, "no trace: 5a did not capture one"))
    elif data["overlap_pct_ours"] is None:
        why = (
            "the trace holds no NCCL kernel (a one-rank NCCL group copies instead of "
            "launching one): this comparison needs 2 or more GPUs"
        )
        rows.append(skipped("A", *TRACE_HTA, why))
    else:
        rows.append(run_check("A", *TRACE_HTA, overlap))
    return rows


def unit_forward_times(t: Trainee, steps: int = 3) -> list[float]:
    """Median forward compute of each unit (embedding, layers, output), in seconds."""
    model = t.wrapped.module
    units = [model.tok_embeddings, *model.layers, model.output]
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


def median_step_s(t: Trainee, steps: int = 5, first: int = 300) -> float:
    times = []
    for s in range(steps + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        train_step(t, first + s)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


@contextmanager
def delayed_forward_gathers(sleep_cycles: int) -> Iterator[None]:
    """Sleep on the communication stream before every all-gather issued in forward."""
    gather = collectives.all_gather

    def slow(out, shard, group, async_op):
        if torch._C._current_graph_task_id() == -1:  # not inside backward
            torch.cuda._sleep(sleep_cycles)
        return gather(out, shard, group, async_op)

    collectives.all_gather = slow
    try:
        yield
    finally:
        collectives.all_gather = gather


def check_delay(t: Trainee, device: torch.device) -> Verdict:
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
    ("1 parity", "yafsdp equals local in fp32 and bf16, every layer checkpointed, "
     "grad_accum=2, on NCCL", check_parity),
    ("2 ordering", "compute waits for comm (NaN-poisoned, delayed collectives) and comm "
     "waits for compute (delayed writes to the bf16 master copy and staging)", check_ordering),
    ("3 no host syncs", "forward and backward run under set_sync_debug_mode('error')",
     check_no_syncs),
    ("4 steady memory", "no engine allocation in steps 2-3; memory_report() equals the "
     "snapshot's bytes allocated in yafsdp_impl/buffers.py", check_steady_state_memory),
]  # fmt: skip
DELAY = (
    "6 injected delay",
    "a forward comm delay of 1x and 2x a layer's compute grows the step by "
    "sum(max(0, delay - compute hidden behind)), not by the serial sum",
)
# Every row the suite writes, for the table of a machine that cannot run it.
NAMES = [(n, p) for n, p, _ in CHECKS] + [TRACE_STEPS, TRACE_HTA, DELAY]


def run() -> list[Check]:
    rows = []
    with nccl_world() as device:
        for name, proves, fn in CHECKS:
            rows.append(run_check("A", name, proves, lambda fn=fn: fn(device)))
            torch.cuda.empty_cache()
        built: list[Trainee] = []

        def probe() -> Trainee:  # built once, for 5 and 6
            if not built:
                built.append(build_probe(device))
            return built[0]

        rows += trace_checks(probe, device)
        rows.append(run_check("A", *DELAY, lambda: check_delay(probe(), device)))
        built.clear()
        torch.cuda.empty_cache()
    return rows
