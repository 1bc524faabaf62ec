"""Suite S: the serial backward's constants on one GPU, no network (about 2 minutes).

Five rows, each a measurement the planner's v4 mechanisms rest on (`harness.plan`):
- 10 FSDP1's cat: FSDP1 with the published settings under the fake process group (its
  streams and hooks run for real): which stream the backward's cat of each unit's
  gradients lands on (the planner puts it on the unshard stream), its bytes per µs, and
  the host time of FSDP1's hooks;
- 11 the chain's wait: a cast and two divides on a priority-0 side stream, made ready at a
  random moment beside Llama 2 34B's backward GEMMs, 200 trials: the ready-to-done wait's
  distribution, and from its mean the race-loss probability of the later links;
- 12 YaFSDP v1's copy: its bf16->fp32 copy on a -1 stream beside the GEMMs, how much longer
  it takes there, and how long a priority-0 kernel made ready by it waits;
- 13 bandwidth: the cast, the divide and a cat as fractions of the device's peak bandwidth;
- 14 allocator retries: FSDP1 at 70B-wide units with checkpointing, capped at 80 GiB.
Each writes its figures into the calibration file suite D writes (`give_way_calibration.json`,
beside the report and in `$OUT`): `give_way.race_loss_probability`, which the planner
reads, and a `one_gpu` section with the rest. The arithmetic here runs without a GPU
(tests replace `probe`'s functions).
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.gpucheck.check_rows import Check, Verdict, run_check

FILE = "give_way_calibration.json"  # suite D's: one file for `calibration=`
SCHEMA = "yafsdp-bench.calibration/1"
TRIALS, LINKS = 200, 3
# Datasheet peak memory bandwidth, GB/s: A100 80GB SXM 2039, H100 SXM 3350, H200 4800
# (NVIDIA A100, H100 and H200 datasheets).
PEAK_GBPS = {"A100": 2039.0, "H100": 3350.0, "H200": 4800.0}
NAMES = [
    ("10 fsdp1 cat stream", "FSDP1's backward cat of a unit's gradients runs on its unshard "
     "stream; its bytes per µs; the host time of its hooks"),
    ("11 chain wait", f"a {LINKS}-kernel chain at priority 0 beside backward GEMMs, {TRIALS} "
     "trials: its wait's distribution and the later links' race-loss probability"),
    ("12 v1 copy at -1", "YaFSDP v1's fp32 gradient copy on a -1 stream beside GEMMs: its "
     "stretch, and a priority-0 kernel's wait after it"),
    ("13 bandwidth", "the cast, divide and cat as fractions of peak memory bandwidth"),
    ("14 allocator retries", "FSDP1 at 70B-wide units with checkpointing under an 80 GiB cap: "
     "the caching allocator's retries"),
]  # fmt: skip


def peak_gbps(device_name: str) -> float | None:
    return next((v for k, v in PEAK_GBPS.items() if k in device_name.upper()), None)


def cat_figures(trace: dict[str, Any]) -> dict[str, Any]:
    """From one profiled FSDP1 step: the stream of the marker launched on the unshard
    stream, the streams of the largest cat kernels (one per unit), their bytes per µs, and
    the host time of the hooks (the rate limiter's waits taken out)."""
    events, numels = trace["events"], sorted(trace["flat_param_numels"], reverse=True)
    kernels = [e for e in events if e["cat"] == "kernel"]
    marker = next((e["stream"] for e in kernels if "sleep" in e["name"].lower()
                   or "spin" in e["name"].lower()), None)  # fmt: skip
    cats = sorted((e for e in kernels if "cat" in e["name"].lower()), key=lambda e: -e["dur"])
    cats = cats[: len(numels)]
    rates = [2 * 2 * n / c["dur"] for n, c in zip(numels, cats, strict=False) if c["dur"] > 0]
    hooks = [e for e in events if e["name"].startswith("FullyShardedDataParallel._")
             and not e["name"].endswith(("rate_limiter", "_prefetch"))]  # fmt: skip
    limiter = sum(e["dur"] for e in events if e["name"].endswith("rate_limiter"))
    host = max(sum(e["dur"] for e in hooks) - limiter, 0.0)
    return {
        "unshard_stream": marker,
        "cat_streams": sorted({c["stream"] for c in cats}),
        "cats": len(cats),
        "cat_bytes_per_us": statistics.median(rates) if rates else None,
        "hook_us": host / len(hooks) if hooks else None,
        "hook_us_per_unit": host / trace["units"] if trace["units"] else None,
    }


def cat_verdict(figures: dict[str, Any]) -> Verdict:
    streams, marker = figures["cat_streams"], figures["unshard_stream"]
    if marker is None or not streams:
        return Verdict(False, figures, "no marker or no cat kernel in the trace")
    ok = streams == [marker]
    return Verdict(ok, figures, "" if ok else f"cats on streams {streams}, unshard is {marker}")


def chain_figures(latencies_ms: list[float], alone_ms: float, gemm_ms: float,
                  links: int = LINKS) -> dict[str, Any]:  # fmt: skip
    """The waits (latency less the chain alone), in GEMMs; the later links' race-loss
    probability from the mean: E[wait]/d = 1/2 (the first link, uniform) + (k-1) p."""
    waits = sorted(max(t - alone_ms, 0.0) / gemm_ms for t in latencies_ms)
    q = statistics.quantiles(waits, n=10)
    mean = statistics.fmean(waits)
    p = min(max((mean - 0.5) / (links - 1), 0.0), 1.0) if links > 1 else 0.0
    return {"trials": len(waits), "gemm_ms": gemm_ms, "chain_alone_ms": alone_ms,
            "wait_gemms_mean": mean, "wait_gemms_p10": q[0], "wait_gemms_p50": q[4],
            "wait_gemms_p90": q[8], "race_loss_probability": p}  # fmt: skip


def copy_figures(v1: dict[str, float], gemm_ms: float) -> dict[str, Any]:
    return {**v1, "copy_stretch": v1["copy_ms_beside_gemms"] / v1["copy_ms_alone"],
            "priority0_wait_gemms": v1["priority0_ms_after_copy"] / gemm_ms}  # fmt: skip


def bandwidth_figures(gbps: dict[str, float], device_name: str) -> dict[str, Any]:
    peak = peak_gbps(device_name)
    out: dict[str, Any] = dict(gbps) | {"peak_gbps": peak}
    for key, value in gbps.items():
        if peak:
            out[key.replace("_gbps", "_efficiency")] = value / peak
    return out


def write_calibration(paths: list[Path], device_name: str, give_way: dict[str, Any],
                      one_gpu: dict[str, Any]) -> None:  # fmt: skip
    """Merge into each calibration file (suite D's, when it ran first): the give_way keys
    the planner reads, and the `one_gpu` figures."""
    for path in paths:
        data: dict[str, Any] = (json.loads(path.read_text()) if path.is_file()
                                else {"schema": SCHEMA})  # fmt: skip
        section: dict[str, Any] = data.setdefault("give_way", {"device": device_name})
        section.update(give_way)
        measured: dict[str, Any] = data.setdefault("one_gpu", {"device": device_name})
        measured.update(one_gpu)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n")


def outputs(device_dir: Path) -> list[Path]:
    out = [device_dir / FILE]
    if os.environ.get("OUT"):
        out.append(Path(os.environ["OUT"]) / FILE)
    return out


# Suite S's work, for its estimate (harness.gpucheck.schedule): FSDP1 built twice (7B-wide
# under the fake process group, and llama3_70b's last rank at 80 GiB), their steps, and the
# side-kernel trials beside GEMMs.
WORK = {"probe build": 2, "probe step": 8, "probe kernel set": 1}


def run(device_dir: Path, device_name: str, device: Any = None,
        on_row: Callable[[Check], None] = lambda row: None) -> list[Check]:  # fmt: skip
    """The five rows, in order; each row's figures go into the calibration as it ends."""
    from harness.gpucheck.suite_s import probe

    files = outputs(device_dir)
    gemm: dict[str, float] = {}

    def gemm_ms() -> float:
        if "ms" not in gemm:
            gemm["ms"] = probe.gemm_ms(device)
        return gemm["ms"]

    def row(index: int, measure: Callable[[], Verdict], give_way: tuple[str, ...] = ()) -> Check:
        def check() -> Verdict:
            verdict = measure()
            figures, key = verdict.figures, NAMES[index][0].split(" ", 1)[1].replace(" ", "_")
            write_calibration(files, device_name, {k: figures[k] for k in give_way},
                              {key: figures})  # fmt: skip
            return verdict

        done = run_check("S", *NAMES[index], check)
        on_row(done)
        return done

    def chain() -> Verdict:
        latencies, alone = probe.chain_latencies(device, TRIALS, LINKS)
        return Verdict(True, chain_figures(latencies, alone, gemm_ms()))

    return [
        row(0, lambda: cat_verdict(cat_figures(probe.fsdp1_trace(device)))),
        row(1, chain, give_way=("race_loss_probability",)),
        row(2, lambda: Verdict(True, copy_figures(probe.v1_copy(device), gemm_ms()))),
        row(3, lambda: Verdict(True, bandwidth_figures(probe.bandwidth(device), device_name))),
        row(4, lambda: Verdict(True, probe.allocator_retries(device))),
    ]
