"""What a job asks of the planner before its ranks start: the dry run's memory check (a
refusal when the job is predicted not to fit its device, naming the fewest checkpointed
layers that would), and the job's prediction (`prediction.json`)."""

from __future__ import annotations

from dataclasses import replace

from harness.config import JobConfig
from harness.jobdir.prediction import TERMS, Prediction

GIB = 2**30
SHOWN_CLASSES = 4


def _size(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB // 10 else f"{n / 2**20:.1f} MiB"


def memory_line_and_errors(cfg: JobConfig) -> tuple[str, list[str]]:
    """One line for the console, and the refusals (empty when it fits or cannot be told)."""
    from harness.plan.memory.model import NEAR_CAPACITY, estimate_memory
    from harness.plan.planner import memory_case, smallest_fitting_ckpt

    estimate = estimate_memory(memory_case(cfg))
    largest = sorted(estimate.by_class.items(), key=lambda kv: -kv[1])[:SHOWN_CLASSES]
    parts = ", ".join(f"{name} {_size(n)}" for name, n in largest)
    line = f"planner: peak {_size(estimate.peak_bytes)} per device ({parts})"
    if cfg.device_memory_gb <= 0:
        return line, []
    have = cfg.device_memory_gb * GIB
    if estimate.peak_bytes < NEAR_CAPACITY * have:
        return f"{line}; fits device_memory_gb={cfg.device_memory_gb:g}", []
    smallest = smallest_fitting_ckpt(cfg)
    need = f"predicted peak {estimate.peak_bytes / GIB:.1f} GiB per device is "
    if estimate.peak_bytes <= have:
        need += f"tight: {NEAR_CAPACITY:.0%} or more of device_memory_gb="
        need += f"{cfg.device_memory_gb:g}, no room left for fragmentation"
    else:
        need += f"more than device_memory_gb={cfg.device_memory_gb:g}"
    if smallest is None:
        fix = "no ckpt_layers fits: use more gpus, a shorter seq_len or a smaller micro_batch"
    else:
        fix = f"the smallest ckpt_layers that fits is {smallest}: use ckpt_layers={smallest}"
    verdict = "tight" if estimate.peak_bytes <= have else "does not fit"
    return f"{line}; {verdict}", [f"{need}; {fix}"]


def host_memory_errors(cfg: JobConfig, memory_bytes: int | None) -> list[str]:
    """CPU ranks share this machine's RAM: refuse a job whose ranks' predicted peaks add up
    to more than it has, before any rank starts (it would otherwise build for minutes and
    then fail to allocate, or meet the OOM killer)."""
    from harness.plan.memory.model import estimate_memory
    from harness.plan.planner import memory_case

    if not memory_bytes:
        return []
    peak = estimate_memory(memory_case(cfg)).peak_bytes
    total = peak * cfg.gpus
    if total <= memory_bytes:
        return []
    return [
        f"model={cfg.model} gpus={cfg.gpus} on CPU: the planner predicts {_size(peak)} per rank, "
        f"{_size(total)} for the {cfg.gpus} ranks, more than this machine's "
        f"{_size(memory_bytes)} of RAM; use a CPU-sized model (llama_tiny, llama_mini, "
        "llama_small), a shorter seq_len, or hydra/launcher=slurm to run it on GPUs"
    ]


def predicted_gpu_hours(cfg: JobConfig) -> dict[str, float] | None:
    """The planner's step time for the job and its GPU-hours: every step it runs (warm-up,
    timed, profiled) times the step time times its GPUs; start-up (process launch, model
    build, NCCL set-up) is not priced. None where the profile has no time figures (CPU)."""
    from harness.plan.planner import predict_time

    try:
        time = predict_time(cfg, ablate=False)  # the step alone: no mechanism's cost
    except (KeyError, ValueError):
        return None
    if time is None:
        return None
    profiled = cfg.profile.warmup + cfg.profile.steps if cfg.profile.steps > 0 else 0
    steps = cfg.warmup_steps + cfg.steps + profiled
    hours = time.iteration_time_s * steps * cfg.gpus / 3600
    return {"iteration_time_s": time.iteration_time_s, "steps": steps, "gpu_hours": hours}


def gpu_hours_text(predicted: dict[str, float], gpus: int) -> str:
    """`5.71 s/step x 28 steps x 256 GPUs = 11.4 GPU-hours`."""
    return (
        f"{predicted['iteration_time_s']:.3g} s/step x {predicted['steps']:g} steps x {gpus} "
        f"GPUs = {predicted['gpu_hours']:.3g} GPU-hours"
    )


# yafsdp's budget on a GPU without a memory figure: only the rank can read it.
UNKNOWN_BUDGET = (
    "yafsdp's memory budget is the GPU's free memory when its engine is built, which the "
    "runner cannot read without taking GPU memory of its own; set device_memory_gb (a "
    "hardware profile, e.g. hardware=h100_80gb) or engine.memory_budget_gb to predict it"
)


def _budget(ran: JobConfig) -> tuple[int | None, str]:
    """The yafsdp budget the ranks' engine will be built with, and where it comes from;
    ValueError where only the rank can tell (see UNKNOWN_BUDGET)."""
    from harness.plan.planner import yafsdp_memory_budget

    if ran.engine.name != "yafsdp":
        return None, ""
    if ran.engine.memory_budget_gb > 0:
        return yafsdp_memory_budget(ran), "engine.memory_budget_gb"
    if ran.device_memory_gb > 0:
        return yafsdp_memory_budget(ran), "device_memory_gb less the rest of the step"
    if ran.device == "cuda":
        raise ValueError(UNKNOWN_BUDGET)
    return yafsdp_memory_budget(ran), "this machine's memory less the rest of the step"


def job_prediction(cfg: JobConfig, device: str | None = None) -> Prediction:
    """The planner's prediction for the job as its ranks will run it (device and backend
    resolved as a rank resolves them, yafsdp's budget as its engine gets it); on a yafsdp
    job with a time prediction, also why each baseline at its point is predicted slower.
    `device`: the device type of ranks that run elsewhere (a SLURM job's), in place of this
    machine's. Never raises: a prediction must never cost a measurement."""
    from harness.engines.registry import BASELINES, ENGINES
    from harness.placement import placed, resolved
    from harness.plan.planner import add_speedups, plan_row

    try:
        ran = resolved(cfg) if device is None else placed(cfg, device)
        budget, source = _budget(ran)
        row = plan_row(ran)
        if ran.engine.name == "yafsdp" and row.time is not None:
            others = [replace(ran, engine=ENGINES[b].config()) for b in BASELINES if b in ENGINES]
            add_speedups([row, *(plan_row(c) for c in others)])
        planned = row.to_dict()
    except Exception as e:  # noqa: BLE001 (any planner failure is the prediction's error)
        return Prediction(error=f"{type(e).__name__}: {e}")
    return Prediction(
        terms={k: planned.get(k) for k in TERMS},
        memory_budget_bytes=budget,
        budget_source=source,
        why={label: list(lines) for label, lines in row.why.items()},
    )
