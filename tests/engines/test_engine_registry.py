"""Every engine label has an entry in each table the planner, the trace tools and the job
dispatch on, they dispatch through those tables, and an unregistered label is refused by
name."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from harness.engines.adapters import ADAPTERS, get_engine
from harness.engines.registry import ENGINE_SPECS, ENGINES, spec_of
from harness.plan.cli import job_configs
from harness.plan.memory.model import MEMORY_MODELS, MemoryCase, estimate_memory
from harness.plan.time.timing import SCHEDULES
from harness.trace.engine_annotations import GRAMMARS

# Each consumer's table of what it picks per label, with the arity of what it picks.
LABEL_TABLES = {"memory model": (MEMORY_MODELS, 1), "time schedule": (SCHEDULES, 3),
                "trace grammar": (GRAMMARS, 1)}  # fmt: skip


@pytest.mark.parametrize("table", LABEL_TABLES, ids=str)
def test_every_table_covers_every_registered_label(table: str) -> None:
    picks, arity = LABEL_TABLES[table]
    assert sorted(picks) == sorted(ENGINES), table
    for label, pick in picks.items():
        assert len(inspect.signature(pick).parameters) == arity, (table, label)


def test_every_adapter_name_has_an_adapter_class() -> None:
    assert sorted(ADAPTERS) == sorted({spec.name for spec in ENGINE_SPECS})
    for name, load in ADAPTERS.items():
        assert load().name == name
    with pytest.raises(ValueError, match="engine='fsdp3' is unknown; choose one of: yafsdp"):
        get_engine("fsdp3")


def test_an_unregistered_label_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="engine 'fsdp3' is not registered; choose one of: yafsdp"):
        spec_of("fsdp3")
    case = MemoryCase(model="llama_tiny", engine="fsdp3", world_size=2, seq_len=64, ckpt_layers=0)
    with pytest.raises(ValueError, match="'fsdp3' is not registered"):
        estimate_memory(case)


def test_a_new_label_is_planned_by_the_model_its_table_entry_picks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new label gets exactly the memory of the model MEMORY_MODELS picks for it (here
    FSDP2's, tuned), not FSDP1's or an error."""
    spec = dataclasses.replace(ENGINES["fsdp2_tuned"], label="fsdp2_copy")
    monkeypatch.setitem(ENGINES, "fsdp2_copy", spec)
    monkeypatch.setitem(MEMORY_MODELS, "fsdp2_copy", MEMORY_MODELS["fsdp2_tuned"])

    def memory(label: str) -> dict[str, int]:
        case = MemoryCase(model="llama_tiny", engine=label, world_size=2, seq_len=64,
                          ckpt_layers=0, asynchronous=False)  # fmt: skip
        return estimate_memory(case).moments  # every moment's bytes

    assert memory("fsdp2_copy") == memory("fsdp2_tuned")
    # on CPU stock FSDP2 gathers nothing ahead, the tuned variant one group: they differ
    assert memory("fsdp2_tuned") != memory("fsdp2")
    assert memory("fsdp2_tuned") != memory("fsdp1")


def test_a_new_label_is_timed_by_the_schedule_its_table_entry_picks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The time model follows SCHEDULES too: a label given FSDP1's schedule gets FSDP1's
    program, op for op, not the entry's other settings' (here the unsharded reference's)."""
    from harness.plan.planner import network, time_case
    from harness.plan.time.timing import build_program
    from tests.plan.planned import priced_config

    (cfg,) = job_configs(["model=llama_tiny", "engine=fsdp1", "gpus=2", "seq_len=64"])
    priced = priced_config(cfg)
    net = network(priced)
    assert net is not None

    def ops(label: str) -> list[tuple[str, str, int]]:
        case = dataclasses.replace(time_case(priced), engine=label)
        prog = build_program(case, priced.device_spec, net, frozenset())
        return [(op.name, op.kind, op.nbytes) for op in prog]

    monkeypatch.setitem(ENGINES, "fsdp1_copy", dataclasses.replace(ENGINES["local"],
                        label="fsdp1_copy"))  # fmt: skip
    monkeypatch.setitem(SCHEDULES, "fsdp1_copy", SCHEDULES["fsdp1"])
    assert ops("fsdp1_copy") == ops("fsdp1")
    assert ops("fsdp1_copy") != ops("local")
