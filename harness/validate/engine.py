"""Engine checks: a label is a registry entry with its settings, and every option set is
one that the label's adapter reads (`harness.engines.options`).

A label names what the report's tables call a job, so a config whose adapter or settings
contradict its label (`engine=fsdp2 engine.label=yafsdp`) would put one engine's times
under another's name: refused. Options that no label fixes (reduce_dtype, a memory
budget, gradient sync) stay free: a job that changes one is a variant of its label, and
the report shows it as one.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from harness.config import BUFFER_PLANS, EngineConfig, JobConfig
from harness.engines.options import ADAPTER_OPTIONS
from harness.engines.registry import (
    AA_TWIN_SUFFIX,
    ADAPTER_NAMES,
    ENGINE_SPECS,
    ENGINES,
    aa_twin_of,
)
from harness.validate.common import one_of, shown

DEFAULTS = EngineConfig()
OPTIONS = tuple(f.name for f in fields(EngineConfig) if f.name not in ("name", "label"))


def engine_errors(engine: EngineConfig) -> list[str]:
    """Refusals of the engine's name, its label and its options."""
    if error := one_of("engine.name", engine.name, ADAPTER_NAMES):
        return [error]
    registered = engine.label if engine.label in ENGINES else aa_twin_of(engine.label)
    if registered is None:
        return [
            f"engine.label={engine.label!r} is not a registered engine; choose one of: "
            f"{', '.join(ENGINES)} (engine=<label> sets its name and settings), or "
            f"<label>{AA_TWIN_SUFFIX} for an A/A twin of one. A variant that needs a name of "
            "its own is an entry in harness/engines/registry.py and sweeps/engine/<label>.yaml"
        ]
    label_error = _label_error(engine, registered)
    plan_error = one_of(
        "engine.buffer_plan", engine.buffer_plan, BUFFER_PLANS,
        more=" (auto: chosen for the memory budget; see yafsdp_impl._plan)",
    )  # fmt: skip
    return [e for e in (label_error, plan_error) if e] + _ignored_options(engine)


# Options every label fixes, whatever its adapter: a comparison never compiles one side
# only, so blocks are compiled under the labels registered so (fsdp2_compile and
# yafsdp_compile, compared with each other) and never under an eager label's description.
FIXED_BY_EVERY_LABEL = frozenset({"compile_blocks"})


def _identifying(name: str) -> list[str]:
    """The options that tell apart the labels of adapter `name` (fsdp2: async_unshard),
    and those every label fixes."""
    own = {key for s in ENGINE_SPECS if s.name == name for key in s.options}
    return sorted(own | FIXED_BY_EVERY_LABEL)


def _registered_as(engine: EngineConfig) -> str | None:
    """The label registered with this adapter and these identifying options, if any."""
    keys = ["name", *_identifying(engine.name)]
    for spec in ENGINE_SPECS:
        registered = spec.config()
        if all(getattr(registered, k) == getattr(engine, k) for k in keys):
            return spec.label
    return None


def _label_error(engine: EngineConfig, label: str) -> str | None:
    """Why `engine` is not the registered engine `label` (its own, or the one it is the
    A/A twin of), or None."""
    registered = ENGINES[label].config()
    keys = ["name", *_identifying(registered.name), *_identifying(engine.name)]
    differ = [k for k in dict.fromkeys(keys) if getattr(registered, k) != getattr(engine, k)]
    if not differ:
        return None

    def settings(config: EngineConfig) -> str:
        return ", ".join(f"engine.{k}={shown(getattr(config, k))}" for k in differ)

    match = _registered_as(engine)
    fix = f"use engine={match} for these settings, or " if match else "use "
    if match is None and "compile_blocks" in differ:
        compiled = " or ".join(s.label for s in ENGINE_SPECS if s.options.get("compile_blocks"))
        fix = (
            f"a comparison never compiles one side only, so blocks are compiled under "
            f"{compiled} alone: use one of them, or "
        )
    return (
        f"engine.label={engine.label} is the registered engine with {settings(registered)}, "
        f"but this config has {settings(engine)}, so the report would name it for an engine "
        f"it did not run; {fix}engine={label} as registered, with no engine.name or "
        "engine.label override"
    )


def _ignored_options(engine: EngineConfig) -> list[str]:
    """Options set away from their defaults that the adapter would silently ignore."""
    errors = []
    for option in OPTIONS:
        value = getattr(engine, option)
        if value == getattr(DEFAULTS, option) or option in ADAPTER_OPTIONS[engine.name]:
            continue
        readers = " or ".join(f"engine={label}" for label in _labels_reading(option, value))
        errors.append(
            f"engine.{option}={shown(value)} is not read by engine.name={engine.name}, which "
            f"would run without it; drop it, or use {readers}"
        )
    return errors


def _labels_reading(option: str, value: Any) -> list[str]:
    """Labels whose adapter reads `option` and whose registered settings allow `value`."""
    return [
        s.label
        for s in ENGINE_SPECS
        if option in ADAPTER_OPTIONS[s.name]
        and (option not in _identifying(s.name) or getattr(s.config(), option) == value)
    ]


def engine_job_errors(cfg: JobConfig) -> list[str]:
    """What an engine needs of the rest of the job: compiled blocks a warm-up step to absorb
    the compile; DeepSpeed bf16 or fp32 (its fp16 needs a loss scaler the harness does not
    set up); the upstream YaFSDP its library, and an AdamW its tensor class can run."""
    errors = []
    if cfg.engine.compile_blocks and cfg.warmup_steps < 1:
        errors.append(
            "engine.compile_blocks=true compiles in the first step, which must not be timed: "
            "set warmup_steps to 1 or more"
        )
    if cfg.engine.name == "deepspeed" and cfg.dtype == "fp16":
        errors.append("engine=deepspeed runs dtype=bf16 or fp32 here, not fp16; choose one")
    if cfg.engine.name == "ya_fsdp":
        errors += _ya_fsdp_errors(cfg)
    return errors


def _ya_fsdp_errors(cfg: JobConfig) -> list[str]:
    from harness.engines.upstream import INSTALL, import_problem

    errors = []
    problem = import_problem()
    if problem is not None:
        errors.append(f"engine=ya_fsdp needs the upstream library, and {problem}: {INSTALL}")
    if cfg.adamw_impl == "for-loop":
        errors.append(
            "engine=ya_fsdp cannot run adamw_impl=for-loop (its tensor class has no lerp_); "
            "use fused or foreach"
        )
    return errors
