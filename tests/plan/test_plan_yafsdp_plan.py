"""The planner chooses yafsdp's buffer plan as the engine does, from the same code and the
same memory budget (`harness.plan.planner.yafsdp_memory_budget`)."""

from __future__ import annotations

import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from harness.models.build import build_job_model, decoder_parts
from harness.plan.cli import job_configs
from harness.plan.memory.model import yafsdp_layout
from harness.plan.planner import memory_case, yafsdp_memory_budget
from yafsdp_impl import YaFSDP


def test_planner_and_engine_choose_the_same_plan_at_the_published_points() -> None:
    configs = [c for c in job_configs(["experiment=yafsdp_readme"]) if c.engine.name == "yafsdp"]
    assert len(configs) == 16
    chosen = {}
    for cfg in configs:
        case = memory_case(cfg)
        budget = yafsdp_memory_budget(cfg)
        assert case.memory_budget_bytes == budget
        _, _, planned = yafsdp_layout(case.model, cfg.gpus, cfg.dtype, cfg.engine.reduce_dtype,
                                      True, "auto", budget)  # fmt: skip
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=cfg.gpus)
        try:
            model, _ = build_job_model(cfg.model, cfg.model_impl)
            parts = decoder_parts(model)
            engine = YaFSDP(model, [parts.embed, *parts.layers, parts.head], device="meta",
                            memory_budget_bytes=budget)  # fmt: skip
        finally:
            dist.destroy_process_group()
        point = f"{cfg.model} {cfg.gpus} {cfg.seq_len} {cfg.ckpt_layers}"
        assert engine.buffer_plan == planned.plan, point
        assert engine.plan_choice.plan_bytes == planned.plan_bytes, point
        chosen[point] = planned.plan.name
    print(chosen)
    # 13 published points leave room under the near-capacity margin for the embedding and
    # output apart; the 70B points and 34B at seq 4096 hold a smaller plan
    roomy = {p for p, plan in chosen.items() if plan == "separate_ends"}
    assert len(roomy) == 13, chosen
    assert all("70b" in p or p.startswith("llama2_34b 256 4096") for p in set(chosen) - roomy)


def test_planner_and_engine_split_the_vocabulary_alike() -> None:
    """split_vocab at llama3_70b on 256 GPUs: the planner's layout and plan are the engine's
    (both split the ends with `split_vocab_units`), the buffers are layer-sized (half an
    end, 0.61 layers there, no longer sizes them), and a step issues one more all-gather and
    one more reduce-scatter per end than `alternating` (the engine's schedule, driven by
    the time model)."""
    from harness.plan.time.programs.yafsdp import skeleton

    model, gpus = "llama3_70b", 256
    _, _, planned = yafsdp_layout(model, gpus, "bf16", "fp32", True, "split_vocab", None)
    layout, _, whole = yafsdp_layout(model, gpus, "bf16", "fp32", True, "alternating", None)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=gpus)
    try:
        built, _ = build_job_model(model, "native")
        parts = decoder_parts(built)
        engine = YaFSDP(built, [parts.embed, *parts.layers, parts.head], device="meta",
                        buffer_plan="split_vocab")  # fmt: skip
    finally:
        dist.destroy_process_group()
    assert (
        engine.buffer_plan == planned.plan and engine.plan_choice.plan_bytes == planned.plan_bytes
    )
    layer = layout.units[1].padded_numel
    assert planned.plan.buffer_numel == (layer, layer) < whole.plan.buffer_numel
    counts, gathered = {}, {}
    for plan in ("alternating", "split_vocab"):
        events = skeleton(model, gpus, "bf16", "fp32", 1, plan)
        kinds = [e[1] for e in events if e[0] == "collective"]
        counts[plan] = {k: kinds.count(k) for k in ("all_gather", "reduce_scatter")}
        gathered[plan] = sum(e[2] for e in events if e[:2] == ("collective", "all_gather"))
    # Each half is gathered in forward and backward (+2 for the embedding), and the two units
    # kept gathered into backward are now the output's halves, so the last layer is gathered
    # again (+1 with the output's second half): one layer's bytes more a step.
    more = {"all_gather": 4, "reduce_scatter": 2}
    assert counts["split_vocab"] == {k: n + more[k] for k, n in counts["alternating"].items()}
    assert gathered["split_vocab"] - gathered["alternating"] == layer * 2  # bf16
