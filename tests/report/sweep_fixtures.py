"""Hand-made sweeps: result.json files written through the schema's own writer.

A module of its own (not conftest) so that tests import it by a name no other test
directory uses.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from harness.jobdir.result import make_result, write_result


def percentile(xs: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), kept here to avoid numpy in tests."""
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def write_job(
    sweep: Path,
    job: str,
    *,
    model: str = "llama_tiny",
    gpus: int = 2,
    seq_len: int = 128,
    ckpt_layers: int = 0,
    engine: str = "yafsdp",
    status: str = "ok",
    error: str | None = None,
    step_times: list[float] | None = None,
    losses: list[float] | None = None,
    dtype: str = "bf16",
    micro_batch: int = 1,
    peak_allocated: int | None = 100 * 2**20,
    peak_rss: int | None = 900 * 2**20,
    overlap_pct: float | None = 50.0,
    backend: str = "gloo",
    git_revision: str = "abc1234",
    png: bool = False,
    predicted: dict[str, Any] | None = None,
    repeat: int | None = None,
    repeats: int | None = None,
    interference: dict[str, Any] | None = None,
) -> Path:
    """Write `<sweep>/<job>/result.json` with every field of the schema filled in."""
    engine_name = "fsdp2" if engine == "fsdp2_tuned" else engine
    config: dict[str, Any] = {
        "model": model,
        "engine": {
            "name": engine_name,
            "label": engine,
            "reduce_dtype": "fp32",
            "async_unshard": engine == "fsdp2_tuned",
            "options": {},
        },
        "gpus": gpus,
        "seq_len": seq_len,
        "ckpt_layers": ckpt_layers,
        "micro_batch": micro_batch,
        "grad_accum": 1,
        "dtype": dtype,
        "warmup_steps": 2,
        "steps": 5,
        "seed": 0,
        "lr": 3e-4,
        "device": "cpu",
        "profile": {"steps": 2, "warmup": 1},
    }
    if repeat is not None:  # a sweep with repeats records both; older results neither
        config.update(repeat=repeat, repeats=repeats or repeat + 1)
    env = {
        "torch": "2.13.0+cpu",
        "cuda": None,
        "nccl": None,
        "backend": backend,
        "device_name": "cpu",
        "device_count": gpus,
        "world_size": gpus,
        "host": "node1",
        "git_revision": git_revision,
        "threads_per_rank": 1,
    }
    metrics: dict[str, Any] = {}
    profile = None
    if status == "ok":
        step_times = step_times or [1.0, 1.0, 1.0, 1.0, 1.0]
        losses = losses if losses is not None else [7.6, 7.5, 7.3, 7.2, 7.0]
        tokens = gpus * micro_batch * seq_len
        median = statistics.median(step_times)
        metrics = {
            "step_times_s": step_times,
            "iteration_time_s": median,
            "iteration_time_p10_s": percentile(step_times, 0.1),
            "iteration_time_p90_s": percentile(step_times, 0.9),
            "tokens_per_s_per_device": tokens / median / gpus,
            "tflops_per_device": 1e6 * tokens / median / gpus / 1e12,
            "mfu": 0.0123,
            "peak_flops_per_device": 2.0e11,
            "peak_flops_source": "measured CPU matmul",
            "flops_per_token": 1e6,
            "peak_memory_allocated_bytes": peak_allocated,
            "peak_memory_reserved_bytes": None,
            "peak_rss_bytes": peak_rss,
            "memory_source": "profiler allocations",
            "memory_breakdown": {"params": 10, "grads": 10},
            "losses": losses,
            "predicted": predicted,
            "interference": interference,
        }
        if overlap_pct is not None:
            profile = {
                "traces": [f"traces/rank{r}.json.gz" for r in range(gpus)],
                "steps": [7, 8],
                "summary": {
                    "overlap_pct": overlap_pct,
                    "exposed_comm_s_per_step": 0.01,
                    "comm_s_per_step": 0.02,
                    "idle_s_per_step": 0.005,
                },
            }
    result = make_result(
        status=status, config=config, error=error, env=env, metrics=metrics, profile=profile
    )
    path = write_result(sweep / job, result)
    if png:
        (sweep / job / "traces").mkdir(exist_ok=True)
        (sweep / job / "traces" / "timeline.png").write_bytes(_tiny_png())
    return path


def _tiny_png() -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import io

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1], [0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def demo_sweep(sweep: Path) -> Path:
    """A small mixed sweep: 2 points x 3 engines, one OOM, timelines for one job."""
    write_job(sweep, "0", engine="yafsdp", step_times=[0.9] * 5, png=True)
    write_job(sweep, "1", engine="fsdp1", step_times=[1.0] * 5)
    write_job(sweep, "2", engine="fsdp2", step_times=[1.2] * 5, overlap_pct=0.0)
    write_job(sweep, "3", engine="yafsdp", seq_len=256, step_times=[1.8] * 5)
    write_job(sweep, "4", engine="fsdp1", seq_len=256, status="oom", error="OutOfMemory: cap")
    write_job(sweep, "5", engine="fsdp2", seq_len=256, step_times=[2.0] * 5)
    return sweep
