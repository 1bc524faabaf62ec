"""Every engine the harness can run, in one table (no torch, so the report can read it).

An engine here is a *label*: what tables call it, the adapter that wraps the model, the
EngineConfig it runs with, the title of its report table, and whether it is a baseline
that yafsdp is compared against. Variants of one adapter (fsdp2 and fsdp2_tuned) are two
labels. Adding an engine touches two files: an entry here and its `sweeps/engine/<label>.yaml`
(plus the adapter module when it is new code); a test checks that the two agree.

Every tool that treats engines differently looks the label up here, never at the label
itself: the planner's memory model and time schedule, and the grammar of the profiler
ranges the engine marks its units with, each as "module:name", imported where used (a
test checks that each resolves). An engine without them cannot be planned or traced.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.config import EngineConfig

if TYPE_CHECKING:
    from harness.engines.base import Engine

YAFSDP = "yafsdp"
REFERENCE = "local"


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    label: str
    name: str  # the adapter's name (EngineConfig.name)
    adapter: str  # "module:Class" of the adapter, imported only when a job runs
    title: str  # heading of this engine's tables in the report
    baseline: bool  # compared against yafsdp in the speedup tables
    # The planner's memory model: (MemoryCase) -> (bytes held all step by class, bytes held
    # by phase), in `harness.plan.memory`.
    memory_model: str
    # The planner's time schedule: (TimeCase, ModelCosts, StepContext) -> the program's ops,
    # in `harness.plan.timing`.
    time_schedule: str
    # Which profiler ranges name a unit: (range name) -> (kind, unit) or None; torch-free.
    annotation_grammar: str
    options: dict[str, Any] = field(default_factory=dict)  # EngineConfig fields beyond name

    def config(self) -> EngineConfig:
        return EngineConfig(name=self.name, label=self.label, **self.options)


# In report order: yafsdp first, then the baselines (fsdp1 is the one the YaFSDP README
# used), then the unsharded reference.
ENGINE_SPECS: tuple[EngineSpec, ...] = (
    EngineSpec(
        label=YAFSDP,
        name="yafsdp",
        adapter="harness.engines.yafsdp:YaFSDPEngine",
        title="YaFSDP (this project's engine, `yafsdp_impl`)",
        baseline=False,
        memory_model="harness.plan.memory:yafsdp_memory",
        time_schedule="harness.plan.timing:yafsdp_schedule",
        annotation_grammar="yafsdp_impl.annotation_names:parse",
    ),
    EngineSpec(
        label="fsdp1",
        name="fsdp1",
        adapter="harness.engines.fsdp1:FSDP1Engine",
        title="FSDP1 (the published baseline: FULL_SHARD, BACKWARD_PRE, forward_prefetch, "
        "limit_all_gathers, use_orig_params=False, params in the job's dtype, fp32 reduce)",
        baseline=True,
        memory_model="harness.plan.memory:fsdp1_memory",
        time_schedule="harness.plan.timing:fsdp1_schedule",
        annotation_grammar="harness.trace.engine_annotations:fsdp1",
    ),
    EngineSpec(
        label="fsdp2",
        name="fsdp2",
        adapter="harness.engines.fsdp2:FSDP2Engine",
        title="FSDP2 (`fully_shard` grouped as torchtitan does, default settings; on CPU its "
        "collectives run synchronously, so it cannot overlap)",
        baseline=True,
        memory_model="harness.plan.memory:fsdp2_memory",
        time_schedule="harness.plan.timing:fsdp2_schedule",
        annotation_grammar="harness.trace.engine_annotations:fsdp2",
    ),
    EngineSpec(
        label="fsdp2_tuned",
        name="fsdp2",
        adapter="harness.engines.fsdp2:FSDP2Engine",
        title="tuned FSDP2 (torchtitan grouping plus asynchronous unshard and explicit prefetch)",
        baseline=True,
        memory_model="harness.plan.memory:fsdp2_tuned_memory",
        time_schedule="harness.plan.timing:fsdp2_schedule",
        annotation_grammar="harness.trace.engine_annotations:fsdp2",
        options={"async_unshard": True},
    ),
    EngineSpec(
        label=REFERENCE,
        name="local",
        adapter="harness.engines.local:LocalEngine",
        title="unsharded reference (whole model per rank, fp32 gradient all-reduce)",
        baseline=False,
        memory_model="harness.plan.memory:local_memory",
        time_schedule="harness.plan.timing:local_schedule",
        annotation_grammar="harness.trace.engine_annotations:unannotated",
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


def resolve(ref: str) -> Any:
    """What a "module:name" reference of an entry names (its module imported now)."""
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


def engine_order(label: str) -> tuple[int, str]:
    """Sort key: registry order, unknown labels last by name."""
    labels = list(ENGINES)
    return (labels.index(label), "") if label in ENGINES else (len(labels), label)


def get_engine(name: str) -> Engine:
    """The adapter for EngineConfig.name (imported lazily: each pulls in its part of torch)."""
    adapters = {s.name: s.adapter for s in ENGINE_SPECS}
    if name not in adapters:
        raise ValueError(f"engine={name!r} is unknown; choose one of: {', '.join(adapters)}")
    return resolve(adapters[name])()
