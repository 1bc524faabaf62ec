"""Every engine the harness can run, in one table (no torch, so the report can read it).

An engine here is a *label*: what tables call it, the adapter that wraps the model, the
EngineConfig it runs with, the title of its report table, and whether it is a baseline
that yafsdp is compared against. Variants of one adapter (fsdp2 and fsdp2_tuned) are two
labels. Adding an engine touches two files: an entry here and its `sweeps/engine/<label>.yaml`
(plus the adapter module when it is new code); a test checks that the two agree.

This is the one list of labels. Every tool that treats engines differently keeps its own
table keyed by label, beside the functions it picks: the adapters
(`harness.engines.adapters.ADAPTERS`), the planner's memory models and time schedules
(`harness.plan.memory.model.MEMORY_MODELS`, `harness.plan.time.timing.SCHEDULES`) and the trace
grammars (`harness.trace.engine_annotations.GRAMMARS`). A test checks that each table
covers every label here. The options each adapter reads are `harness.engines.options`;
a job's label must agree with its entry here in adapter and `options` (harness.validate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.config import EngineConfig

YAFSDP = "yafsdp"
REFERENCE = "local"


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    label: str
    name: str  # the adapter's name (EngineConfig.name)
    title: str  # heading of this engine's tables in the report
    baseline: bool  # compared against yafsdp in the speedup tables
    options: dict[str, Any] = field(default_factory=dict)  # EngineConfig fields beyond name

    def config(self) -> EngineConfig:
        return EngineConfig(name=self.name, label=self.label, **self.options)


# In report order: yafsdp first, then the baselines (fsdp1 is the one the YaFSDP README
# used), then the unsharded reference.
ENGINE_SPECS: tuple[EngineSpec, ...] = (
    EngineSpec(
        label=YAFSDP,
        name="yafsdp",
        title="YaFSDP (this project's engine, `yafsdp_impl`)",
        baseline=False,
    ),
    EngineSpec(
        label="yafsdp_compile",
        name="yafsdp",
        title="YaFSDP with each block's forward compiled (compared with `fsdp2_compile`, so "
        "that no comparison compiles one side only)",
        # Compared against yafsdp too: what compiling gains the engine itself.
        baseline=True,
        options={"compile_blocks": True},
    ),
    EngineSpec(
        label="fsdp1",
        name="fsdp1",
        title="FSDP1 (the published baseline: FULL_SHARD, BACKWARD_PRE, forward_prefetch, "
        "limit_all_gathers, use_orig_params=False, params in the job's dtype, fp32 reduce)",
        baseline=True,
    ),
    EngineSpec(
        label="fsdp2",
        name="fsdp2",
        title="FSDP2 (`fully_shard` grouped as torchtitan does, default settings; on CPU its "
        "collectives run synchronously, so it cannot overlap)",
        baseline=True,
    ),
    EngineSpec(
        label="fsdp2_tuned",
        name="fsdp2",
        title="tuned FSDP2 (torchtitan grouping plus asynchronous unshard and explicit prefetch)",
        baseline=True,
        options={"async_unshard": True},
    ),
    EngineSpec(
        label="fsdp2_compile",
        name="fsdp2",
        title="FSDP2 with each block compiled (torchtitan's usual setting: `torch.compile` "
        "per block before `fully_shard`)",
        baseline=True,
        options={"compile_blocks": True},
    ),
    EngineSpec(
        label="deepspeed",
        name="deepspeed",
        title="DeepSpeed ZeRO-3 (one block per fetch unit, norm weights persistent, "
        "DeepSpeed's default prefetch and buckets, fp32 reduce)",
        baseline=True,
    ),
    EngineSpec(
        label="ya_fsdp",
        name="ya_fsdp",
        title="upstream YaFSDP (`ya_fsdp.fully_shard` from yandex/YaFSDP, grouped as "
        "torchtitan groups FSDP2; runs where the user installed it)",
        baseline=True,
    ),
    EngineSpec(
        label=REFERENCE,
        name="local",
        title="unsharded reference (whole model per rank, fp32 gradient all-reduce)",
        baseline=False,
    ),
)

ENGINES: dict[str, EngineSpec] = {spec.label: spec for spec in ENGINE_SPECS}
BASELINES: tuple[str, ...] = tuple(s.label for s in ENGINE_SPECS if s.baseline)
ADAPTER_NAMES: tuple[str, ...] = tuple(dict.fromkeys(s.name for s in ENGINE_SPECS))


def spec_of(label: str) -> EngineSpec:
    """The registry entry of `label`; an unknown label is an error that names the known ones."""
    if label not in ENGINES:
        raise ValueError(f"engine {label!r} is not registered; choose one of: {', '.join(ENGINES)}")
    return ENGINES[label]


def engine_order(label: str) -> tuple[int, str]:
    """Sort key: registry order, unknown labels last by name."""
    labels = list(ENGINES)
    return (labels.index(label), "") if label in ENGINES else (len(labels), label)


# An A/A check runs one registered engine under a second label, `<label>_aa`
# (`experiment=aa_check`): the same engine and settings, compared with itself, so that any
# speedup the report shows between the two is noise.
AA_TWIN_SUFFIX = "_aa"


def aa_twin_of(label: str) -> str | None:
    """The registered label whose A/A twin `label` is (`yafsdp_aa` -> `yafsdp`), else None."""
    base = label.removesuffix(AA_TWIN_SUFFIX)
    return base if label.endswith(AA_TWIN_SUFFIX) and base in ENGINES else None
