"""Every engine label carries what the planner and the trace tools dispatch on, and they
dispatch through it: a new label is planned by the models its entry names, and an
unregistered one is refused by name."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from harness.engines import registry
from harness.engines.registry import ENGINE_SPECS, ENGINES, resolve, spec_of
from harness.plan.cli import job_configs
from harness.plan.memory import MemoryCase, estimate_memory

REFERENCES = ("memory_model", "time_schedule", "annotation_grammar")


@pytest.mark.parametrize("spec", ENGINE_SPECS, ids=lambda s: s.label)
def test_every_label_names_models_that_exist(spec: registry.EngineSpec) -> None:
    for field in REFERENCES:
        ref = getattr(spec, field)
        assert isinstance(ref, str) and ref.count(":") == 1, (spec.label, field, ref)
        target = resolve(ref)  # imports the module
        assert callable(target), (spec.label, field, ref)
    params = {f: len(inspect.signature(resolve(getattr(spec, f))).parameters) for f in REFERENCES}
    assert params == {"memory_model": 1, "time_schedule": 3, "annotation_grammar": 1}


def test_the_registry_itself_imports_no_model() -> None:
    fields = {f.name for f in dataclasses.fields(registry.EngineSpec)}
    assert set(REFERENCES) <= fields
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(registry.EngineSpec)
               if f.name in REFERENCES)  # fmt: skip


def test_an_unregistered_label_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="engine 'fsdp3' is not registered; choose one of: yafsdp"):
        spec_of("fsdp3")
    case = MemoryCase(model="llama_tiny", engine="fsdp3", world_size=2, seq_len=64, ckpt_layers=0)
    with pytest.raises(ValueError, match="'fsdp3' is not registered"):
        estimate_memory(case)


def test_a_new_label_is_planned_by_the_models_its_entry_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A label the planner has never heard of gets exactly the memory of the model its entry
    names (here FSDP2's, tuned), not FSDP1's or an error."""
    spec = dataclasses.replace(ENGINES["fsdp2_tuned"], label="fsdp2_copy")
    monkeypatch.setitem(ENGINES, "fsdp2_copy", spec)

    def memory(label: str) -> dict[str, int]:
        case = MemoryCase(model="llama_tiny", engine=label, world_size=2, seq_len=64,
                          ckpt_layers=0, asynchronous=False)  # fmt: skip
        return estimate_memory(case).moments  # every moment's bytes

    assert memory("fsdp2_copy") == memory("fsdp2_tuned")
    # on CPU stock FSDP2 gathers nothing ahead, the tuned variant one group: they differ
    assert memory("fsdp2_tuned") != memory("fsdp2")
    assert memory("fsdp2_tuned") != memory("fsdp1")


def test_a_new_label_is_timed_by_the_schedule_its_entry_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The time model follows the entry too: a label naming FSDP1's schedule gets FSDP1's
    program, op for op, and one naming the unsharded reference's gets that one."""
    from harness.plan.planner import network, time_case
    from harness.plan.timing import build_program
    from tests.plan.planned import priced_config

    (cfg,) = job_configs(["model=llama_tiny", "engine=fsdp1", "gpus=2", "seq_len=64"])
    priced = priced_config(cfg)
    net = network(priced)
    assert net is not None

    def ops(label: str) -> list[tuple[str, str, int]]:
        case = dataclasses.replace(time_case(priced), engine=label)
        prog = build_program(case, priced.device_spec, net, frozenset())
        return [(op.name, op.kind, op.nbytes) for op in prog]

    schedule = ENGINES["fsdp1"].time_schedule
    monkeypatch.setitem(ENGINES, "fsdp1_copy", dataclasses.replace(ENGINES["local"],
                        label="fsdp1_copy", time_schedule=schedule))  # fmt: skip
    assert ops("fsdp1_copy") == ops("fsdp1")
    assert ops("fsdp1_copy") != ops("local")
