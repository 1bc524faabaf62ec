"""Numbers out of their range: counts, amounts, the learning rate, profiling, the drill.

Comparisons are written `not value >= 0` so that a NaN, which compares false with
anything, is refused with the rest.
"""

from __future__ import annotations

import math

from harness.config import FaultConfig, JobConfig

AT_LEAST_ONE = ("gpus", "seq_len", "micro_batch", "grad_accum", "steps", "gpus_per_node")
ZERO_OR_MORE = ("warmup_steps", "ckpt_layers", "memory_limit_gb", "device_memory_gb")
TIMEOUTS = ("job_timeout_s", "collective_timeout_s")


def range_errors(cfg: JobConfig) -> list[str]:
    return [
        *_count_errors(cfg),
        *_training_errors(cfg),
        *_profile_errors(cfg),
        *_fault_errors(cfg),
        *repeat_errors(cfg.repeats, cfg.repeat),
    ]


def _count_errors(cfg: JobConfig) -> list[str]:
    errors = []
    for field in AT_LEAST_ONE:
        if not getattr(cfg, field) >= 1:
            errors.append(f"{field}={getattr(cfg, field)} must be at least 1")
    for field in ZERO_OR_MORE:
        if not getattr(cfg, field) >= 0:
            errors.append(f"{field}={getattr(cfg, field)} must be 0 or more")
    if not cfg.threads_per_rank >= 0:
        errors.append(f"threads_per_rank={cfg.threads_per_rank} must be 0 (cores / ranks) or more")
    for field in TIMEOUTS:
        if not getattr(cfg, field) > 0:
            errors.append(f"{field}={getattr(cfg, field)} must be more than 0 seconds")
    return errors


def _training_errors(cfg: JobConfig) -> list[str]:
    errors = []
    if not (math.isfinite(cfg.lr) and cfg.lr >= 0):
        errors.append(f"lr={cfg.lr} must be a finite learning rate, 0 or more (default 3e-4)")
    if not cfg.clip_grad_norm >= 0:
        errors.append(f"clip_grad_norm={cfg.clip_grad_norm} must be 0 (off) or a positive norm")
    if not cfg.engine.memory_budget_gb >= 0:
        errors.append(
            f"engine.memory_budget_gb={cfg.engine.memory_budget_gb} must be 0 (the device's "
            "memory less the rest of the step) or a budget in GiB"
        )
    return errors


def _profile_errors(cfg: JobConfig) -> list[str]:
    errors = []
    if not cfg.profile.steps >= 0:
        errors.append(f"profile.steps={cfg.profile.steps} must be 0 (no profiling) or more")
    if not cfg.profile.warmup >= 0:
        errors.append(
            f"profile.warmup={cfg.profile.warmup} must be 0 or more (profiler steps before "
            "the recorded ones)"
        )
    return errors


def last_step(cfg: JobConfig) -> int:
    """The number of the job's last step: steps count from 0 over warm-up, timed steps and,
    where profiling is on, the profiler's own warm-up and recorded steps."""
    profiled = cfg.profile.warmup + cfg.profile.steps if cfg.profile.steps > 0 else 0
    return cfg.warmup_steps + cfg.steps + profiled - 1


def _fault_errors(cfg: JobConfig) -> list[str]:
    errors = delay_errors(cfg.fault, cfg.engine.name)
    if cfg.fault.kind == "none":
        return errors
    if not 0 <= cfg.fault.rank < cfg.gpus:
        errors.append(f"fault.rank={cfg.fault.rank} is not a rank of gpus={cfg.gpus}")
    last = last_step(cfg)
    if not 0 <= cfg.fault.step <= last:
        errors.append(
            f"fault.step={cfg.fault.step} is not a step of this job, so the drill would never "
            f"fire: it steps 0..{last} (warmup_steps={cfg.warmup_steps}, steps={cfg.steps}, "
            f"profile.warmup+steps={last + 1 - cfg.warmup_steps - cfg.steps}); choose "
            f"fault.step in 0..{last}"
        )
    return errors


def repeat_errors(repeats: object, repeat: object = 0) -> list[str]:
    """`repeats` (runs of each job) must be a whole number >= 1, and `repeat` (which run
    this is, set by the sweep) one of 0..repeats-1."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        return [
            f"repeats={repeats} must be a whole number of at least 1 (the runs of each job "
            "at its grid point); use repeats=1 for one run, repeats=3 to measure run-to-run noise"
        ]
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 0 <= repeat < repeats:
        return [
            f"repeat={repeat} is not one of the {repeats} run(s) 0..{repeats - 1}; the sweep sets "
            "repeat itself: drop it and set repeats=N"
        ]
    return []


# fault.kind=delay (harness.rank.faults): per adapter (EngineConfig.name), the engine ranges
# a delay may sit in, as the engine names them. Torch-free, so the pre-flight check lists them.
DELAY_HOOKS: dict[str, tuple[str, ...]] = {
    "yafsdp": (
        "yafsdp.all_gather",
        "yafsdp.reduce_scatter",
        "yafsdp.all_reduce",
        "yafsdp.forward",
        "yafsdp.backward",
    ),
    "fsdp1": (
        "FullyShardedDataParallel._pre_forward",
        "FullyShardedDataParallel._post_forward",
        "FullyShardedDataParallel._pre_backward_hook",
        "FullyShardedDataParallel._post_backward_hook",
    ),
    "fsdp2": (
        "FSDP::all_gather",
        "FSDP::pre_forward",
        "FSDP::post_forward",
        "FSDP::pre_backward",
        "FSDP::post_backward_reduce",
    ),
}


def delay_errors(fault: FaultConfig, engine: str) -> list[str]:
    """What is wrong with a delay fault for `engine`, each naming the field and the fix."""
    if fault.kind != "delay":
        if fault.where or fault.ms:
            return [
                f"fault.where and fault.ms are read by fault.kind=delay only, not "
                f"fault.kind={fault.kind}; drop them, or set fault.kind=delay"
            ]
        return []
    errors = []
    hooks = DELAY_HOOKS.get(engine, ())
    if not hooks:
        errors.append(
            f"fault.kind=delay needs an engine with named ranges ({', '.join(DELAY_HOOKS)}), "
            f"not engine.name={engine}"
        )
    elif fault.where not in hooks:
        errors.append(
            f"fault.where={fault.where!r} is not a range of engine.name={engine}; choose one "
            f"of: {', '.join(hooks)}"
        )
    if not fault.ms > 0:
        errors.append(f"fault.ms={fault.ms} must be more than 0 milliseconds")
    return errors
