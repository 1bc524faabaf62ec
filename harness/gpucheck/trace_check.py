"""Check 5: a real CUDA trace through `harness.trace`, and against HolisticTraceAnalysis.

Two rows: every device event falls in a profiler step; our overlap % equals HTA's. The
second needs communication kernels, which a one-rank NCCL group does not launch (it
copies), so on one GPU it is a skipped row that says so.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from harness.gpucheck.check_rows import Check, Verdict, run_check, skipped
from harness.gpucheck.training import train_step
from harness.rank.session import Session


def capture_trace(t: Session, device: torch.device) -> dict[str, Any]:
    """Profile two steps of `t`; our per-step analysis, and HTA's overlap when the trace
    holds communication kernels (a one-rank NCCL group copies instead of launching one)."""
    from harness.rank.profiling import capture_profile
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


def trace_checks(probe: Callable[[], Session], device: torch.device) -> list[Check]:
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
