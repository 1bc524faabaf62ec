"""Each engine is set up as its own best users run it, and says so: the registry agrees with
the Hydra configs, FSDP2 is grouped as torchtitan groups it, FSDP1 is the published FSDP1,
and every job records its effective settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from harness.config import JobConfig
from harness.engines.registry import BASELINES, ENGINES, REFERENCE, YAFSDP
from harness.models.shapes import get_shape
from tests.distributed import run_on_ranks
from tests.plan.engine_capture import fake_world
from tests.rank.training import shared_test_engines, short_job, train_jobs

SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"


def test_every_engine_config_matches_the_registry() -> None:
    files = {p.stem: yaml.safe_load(p.read_text()) for p in (SWEEPS / "engine").glob("*.yaml")}
    assert sorted(files) == sorted(ENGINES), "sweeps/engine/*.yaml and the registry differ"
    for label, spec in ENGINES.items():
        expected = {k: v for k, v in vars(spec.config()).items()}
        got = {**vars(JobConfig().engine), **files[label]}
        assert got == expected, f"sweeps/engine/{label}.yaml disagrees with the registry"


def test_registry_orders_yafsdp_first_and_names_the_baselines() -> None:
    assert list(ENGINES)[0] == YAFSDP
    assert BASELINES == (
        "yafsdp_compile",
        "fsdp1",
        "fsdp2",
        "fsdp2_tuned",
        "fsdp2_compile",
        "deepspeed",
        "ya_fsdp",
    )
    assert REFERENCE in ENGINES and not ENGINES[REFERENCE].baseline


def _config(label: str, world_size: int, ckpt: int) -> JobConfig:
    return short_job(label, world_size, seq_len=32, ckpt_layers=ckpt, steps=1)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("setup")
    labels = shared_test_engines()
    configs = [_config(label, 2, 1) for label in labels]
    runs = run_on_ranks(train_jobs, 2, configs, str(root), start_method="fork")[0]
    return {label: run[1] for label, run in zip(labels, runs, strict=True)}


def test_fsdp2_is_grouped_as_torchtitan_groups_it(recorded: dict[str, dict]) -> None:
    n_layers = get_shape("llama_tiny").n_layers
    for label in ("fsdp2", "fsdp2_tuned"):
        s = recorded[label]
        assert s["groups"] == [
            ["tok_embeddings"],
            *[[f"layers.{i}"] for i in range(n_layers)],
            ["norm", "output"],
        ]
        assert s["reshard_after_forward"] == [True] * (1 + n_layers) + [False]
        assert s["reduce_dtype"] == "float32" and s["gradient_sync"] == "every micro-batch"
    assert recorded["fsdp2_tuned"]["async_unshard"] and not recorded["fsdp2"]["async_unshard"]


def test_fsdp1_is_the_published_fsdp1(recorded: dict[str, dict]) -> None:
    s = recorded["fsdp1"]
    blocks = [f"layers.{i}" for i in range(get_shape("llama_tiny").n_layers)]
    assert s["units"] == ["tok_embeddings", *blocks, "output", "<root>"]
    assert s["use_orig_params"] is False
    assert (s["backward_prefetch"], s["forward_prefetch"], s["limit_all_gathers"]) == (
        "BACKWARD_PRE",
        True,
        True,
    )
    assert (s["param_dtype"], s["reduce_dtype"]) == ("bfloat16", "float32")
    assert s["sharding_strategy"] == "FULL_SHARD"


def test_fsdp1_records_the_strategy_it_runs_at_one_rank(tmp_path: Path) -> None:
    # FSDP1 turns FULL_SHARD into NO_SHARD on one rank (a one-GPU NCCL job): say so.
    ((_, settings),) = run_on_ranks(
        train_jobs, 1, [_config("fsdp1", 1, 0)], str(tmp_path), start_method="fork"
    )[0]
    assert settings["sharding_strategy"] == "NO_SHARD"


def test_every_engine_records_the_shared_settings(recorded: dict[str, dict]) -> None:
    optimizers = {recorded[label]["optimizer"] for label in recorded}
    assert optimizers == {"torch.optim.AdamW(fused, weight_decay=0)"}
    for label in recorded:
        s = recorded[label]
        assert s["clip_grad_norm"] == 1.0 and s["ckpt_layers"] == 1, label
    blocks = [f"layers.{i}" for i in range(get_shape("llama_tiny").n_layers)]
    assert recorded[YAFSDP]["units"] == ["tok_embeddings", *blocks, "output"]


def test_fsdp2_no_sync_variant_is_fsdp2_only() -> None:
    from harness.validate import validation_errors

    cfg = JobConfig(engine=ENGINES["fsdp1"].config())
    cfg.engine.sync_every_micro_batch = False
    (error,) = validation_errors(cfg)
    assert "engine.sync_every_micro_batch=false" in error and "engine=fsdp2" in error
    cfg = JobConfig(engine=ENGINES["fsdp2"].config())
    cfg.engine.sync_every_micro_batch = False
    assert validation_errors(cfg) == []


def test_a_memory_budget_is_yafsdps_and_not_negative() -> None:
    from harness.validate import validation_errors

    cfg = JobConfig(engine=ENGINES["fsdp2"].config())
    cfg.engine.memory_budget_gb = 10
    (error,) = validation_errors(cfg)
    assert "engine.memory_budget_gb" in error and "engine=yafsdp" in error
    cfg = JobConfig(engine=ENGINES[YAFSDP].config())
    cfg.engine.memory_budget_gb = -1
    (error,) = validation_errors(cfg)
    assert "engine.memory_budget_gb=-1" in error and "GiB" in error
    cfg.engine.memory_budget_gb = 10
    assert validation_errors(cfg) == []


def test_the_budget_picks_yafsdps_plan_and_the_job_records_it() -> None:
    """A budget the separate_ends plan fits gives it; one far below even the smallest
    two-buffer plan gives that plan (min_bytes: half_staging's extra reduce-scatters are
    taken only by name); the engine settings say which, with the plan it was chosen over."""
    from harness.rank.session import Session

    seen = {}
    with fake_world(2):
        for budget_gb, want in ((100, "separate_ends"), (0.001, "over separate_ends")):
            cfg = JobConfig(engine=ENGINES[YAFSDP].config(), gpus=2, dtype="fp32")
            cfg.engine.memory_budget_gb = budget_gb
            session = Session.build(cfg, 0, 2, torch.device("cpu"))
            assert session.ctx.memory_budget_bytes == int(budget_gb * 2**30)
            plan = session.settings["buffer_plan"]
            assert want in plan and "budget" in plan and "over " in plan
            assert not plan.startswith(("half_staging", "split_vocab"))  # only by name
            seen[want] = plan
    assert len(seen) == 2


@pytest.mark.parametrize("ckpt_layers", [0, 1])
def test_fsdp1_names_the_decoder_layer_class_it_wrapped(ckpt_layers: int) -> None:
    """The class is read before wrapping: after it, every layer is a FullyShardedDataParallel."""
    from harness.rank.session import Session

    with fake_world(2):
        cfg = JobConfig(engine=ENGINES["fsdp1"].config(), gpus=2, dtype="fp32",
                        ckpt_layers=ckpt_layers)  # fmt: skip
        session = Session.build(cfg, 0, 2, torch.device("cpu"))
    wrap = session.settings["auto_wrap"]
    assert wrap == "token embedding, each TransformerBlock, output projection", wrap


def test_a_named_split_vocab_plan_is_held_and_recorded() -> None:
    """engine.buffer_plan=split_vocab: the engine splits the embedding and the output into
    vocabulary halves (two units more), holds the plan whatever the budget, and the settings
    name it, the units the engine runs (each end's two halves, by their module paths, as its
    ranges name them), and no smaller plan beside it (the plans that keep the ends whole
    are compared by name)."""
    from harness.rank.session import Session

    with fake_world(2):
        cfg = JobConfig(engine=ENGINES[YAFSDP].config(), gpus=2, dtype="fp32")
        cfg.engine.buffer_plan = "split_vocab"
        session = Session.build(cfg, 0, 2, torch.device("cpu"))
        plan = session.settings["buffer_plan"]
        assert plan.startswith("split_vocab: buffers 2×") and "smallest" not in plan, plan
        units = session.settings["units"]
        assert units[:2] == ["tok_embeddings.vocab_lo", "tok_embeddings.vocab_hi"], units
        assert units[-2:] == ["output.vocab_lo", "output.vocab_hi"], units
