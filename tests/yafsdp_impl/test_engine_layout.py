"""Layout at cluster scale (fake process group, meta device) and the refusal messages."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from tests.yafsdp_impl.llama import SHAPES, build_llama, initial_value
from tests.yafsdp_impl.models import GPT, build, units_of
from yafsdp_impl import YaFSDP, byte_classes, held_bytes


@pytest.fixture
def fake_world(request):
    """A fake process group of the requested size in this process (collectives do nothing)."""
    world_size = getattr(request, "param", 4)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    yield world_size
    dist.destroy_process_group()  # ranks of other tests fork from this process


def _padded(n: int, p: int) -> int:
    return max(p, -(-n // p) * p)


@pytest.mark.parametrize("fake_world", [256], indirect=True)
def test_llama2_70b_on_256_ranks_bytes_by_class(fake_world: int) -> None:
    p = fake_world
    shape = SHAPES["llama2_70b"]
    model = build_llama("llama2_70b")
    engine = YaFSDP(model, units_of(model), device="meta")
    assert all(t.is_meta for t in (*engine.buffers.weight, engine.buffers.master))

    # The arithmetic, from the shape alone: norms leave the layers for the resident unit.
    d, v = shape.dim, shape.vocab_size
    units = [v * d] + [shape.layer_params() - 2 * d] * shape.n_layers + [v * d]
    resident = shape.n_layers * 2 * d + d
    padded = [_padded(n, p) for n in units]
    big, res = max(padded), _padded(resident, p)
    shards = sum(padded) // p + res // p
    bf16, fp32 = 2, 4
    want = {
        "weights": (2 * big + res) * bf16,
        "grads": (2 * big + res) * bf16,
        "master": shards * fp32 * 2,  # fp32 params and their fp32 grads
        # fp32 copies of one gradient buffer and of the resident one, the reduce-scatter
        # outputs, and the bf16 copy of the master shards that the gathers read.
        "staging": (big + res) * fp32 + (big // p + res // p) * fp32 + shards * bf16,
    }
    got = byte_classes(engine.memory_report())
    assert got == want
    assert sum(units) + resident == shape.num_params()
    gib = {k: round(b / 2**30, 2) for k, b in got.items()}
    print(f"llama2_70b on {p} ranks, per-rank GiB: {gib}")
    # About 70e9 / 256 parameters per rank; unsharded weights are two layers' worth.
    assert got["master"] == pytest.approx(shape.num_params() / p * 8, rel=1e-3)
    assert got["weights"] < 3 * (shape.layer_params() * bf16)


@pytest.mark.parametrize("fake_world", [64], indirect=True)
def test_llama3_8b_on_64_ranks_buffer_plan_is_layer_sized(fake_world: int) -> None:
    """The embedding and output (each 2.4 layers) share one buffer; the layers alternate
    two layer-sized ones and the staging is layer-sized: the engine holds exactly that
    arithmetic, less than two largest-unit buffers would."""
    p = fake_world
    shape = SHAPES["llama3_8b"]
    model = build_llama("llama3_8b")
    engine = YaFSDP(model, units_of(model), device="meta")
    d, v = shape.dim, shape.vocab_size
    units = [v * d] + [shape.layer_params() - 2 * d] * shape.n_layers + [v * d]
    padded = [_padded(n, p) for n in units]
    ends, layer = max(padded[0], padded[-1]), max(padded[1:-1])
    assert ends > 2 * layer
    res = _padded(shape.n_layers * 2 * d + d, p)
    shards = sum(padded) // p + res // p
    bf16, fp32 = 2, 4

    def held(buffers: int, staging: int) -> dict[str, int]:
        return {
            "weights": (buffers + res) * bf16,
            "grads": (buffers + res) * bf16,
            "master": shards * fp32 * 2,
            "staging": (staging + res) * fp32 + (staging // p + res // p) * fp32 + shards * bf16,
        }

    layer_sized = held(ends + 2 * layer, layer)
    got = byte_classes(engine.memory_report())
    assert engine.buffer_plan.name == "ends_shared"
    assert engine.buffer_plan.buffer_of == (0, *[1, 2] * (shape.n_layers // 2), 0)
    assert got == layer_sized
    largest_unit = held(2 * ends, ends)
    saved = sum(largest_unit.values()) - sum(got.values())
    print(f"llama3_8b on {p} ranks: ends_shared saves {saved / 2**30:.2f} GiB per rank")
    assert saved > 0


@pytest.mark.parametrize("fake_world", [64], indirect=True)
def test_llama3_8b_plan_follows_the_memory_budget(fake_world: int) -> None:
    """With room for it, the embedding and the output keep a buffer each (separate_ends);
    with a budget one byte short of that, the plan is ends_shared. Either way the engine
    holds exactly the plan's arithmetic, and memory_report names the plan, its bytes, the
    plan it was chosen over and the budget."""
    p = fake_world
    shape = SHAPES["llama3_8b"]
    d, v = shape.dim, shape.vocab_size
    units = [v * d] + [shape.layer_params() - 2 * d] * shape.n_layers + [v * d]
    padded = [_padded(n, p) for n in units]
    emb, out, layer = padded[0], padded[-1], max(padded[1:-1])
    res = _padded(shape.n_layers * 2 * d + d, p)
    shards = sum(padded) // p + res // p
    bf16, fp32 = 2, 4

    def held(buffers: int) -> dict[str, int]:
        return {
            "weights": (buffers + res) * bf16,
            "grads": (buffers + res) * bf16,
            "master": shards * fp32 * 2,
            "staging": (layer + res) * fp32 + (layer // p + res // p) * fp32 + shards * bf16,
        }

    roomy, shared = held(emb + out + 2 * layer), held(max(emb, out) + 2 * layer)
    half = -(-layer // p // 2) * p
    for budget, want, plan, rejected in (
        (sum(roomy.values()), roomy, "separate_ends", "ends_shared"),
        (sum(roomy.values()) - 1, shared, "ends_shared", "separate_ends"),
    ):
        model = build_llama("llama3_8b")
        engine = YaFSDP(model, units_of(model), device="meta", memory_budget_bytes=budget)
        report = engine.memory_report()
        assert byte_classes(report) == want, plan
        assert report["buffer_plan"] == {
            "name": plan,
            "bytes": sum(want.values()),
            "rejected": rejected,
            "rejected_bytes": sum((shared if plan != "ends_shared" else roomy).values()),
            "budget_bytes": budget,
            # ends_shared with half a layer's staging: the smallest plan it could run
            "smallest": "half_staging",
            "smallest_bytes": sum(shared.values()) - (layer - half) * fp32 * (p + 1) // p,
        }
    layer_sized = (0, *[2, 3] * (shape.n_layers // 2), 1)
    assert engine.buffer_plan.name == "ends_shared"
    model = build_llama("llama3_8b")
    roomy_engine = YaFSDP(model, units_of(model), device="meta", memory_budget_bytes=2**50)
    assert roomy_engine.buffer_plan.buffer_of == layer_sized


@pytest.mark.parametrize("fake_world", [256], indirect=True)
def test_llama3_70b_pressure_plans_hold_their_arithmetic(fake_world: int) -> None:
    """At Llama 3's 128k vocabulary the ends are 1.2 layers each: two of them are less than
    one end and two layers, so min_bytes is lean_alternating (two largest-unit buffers, a
    layer-sized staging), 0.7 GiB under alternating's largest-unit staging; half_staging
    halves that staging for a further 1.6 GiB; a budget one byte short of min_bytes still
    gets min_bytes (half_staging, with a reduce-scatter more per layer, only by name), and
    the choice names half_staging as the smallest plan."""
    p = fake_world
    shape = SHAPES["llama3_70b"]
    d, v = shape.dim, shape.vocab_size
    units = [v * d] + [shape.layer_params() - 2 * d] * shape.n_layers + [v * d]
    padded = [_padded(n, p) for n in units]
    ends, layer = max(padded[0], padded[-1]), max(padded[1:-1])
    res = _padded(shape.n_layers * 2 * d + d, p)
    shards = sum(padded) // p + res // p
    half = -(-layer // p // 2) * p
    bf16, fp32 = 2, 4

    def held(staging: int) -> int:
        buffers = 2 * ends + res
        staged = (staging + res) * fp32 + (staging // p + res // p) * fp32
        return 2 * buffers * bf16 + shards * fp32 * 2 + staged + shards * bf16

    got = {}
    for plan in ("alternating", "min_bytes", "half_staging"):
        model = build_llama("llama3_70b")
        engine = YaFSDP(model, units_of(model), device="meta", buffer_plan=plan)
        got[plan] = (engine.buffer_plan.name, held_bytes(engine.memory_report()))
    assert got == {
        "alternating": ("alternating", held(ends)),
        "min_bytes": ("lean_alternating", held(layer)),
        "half_staging": ("half_staging", held(half)),
    }
    gib = {k: round(b / 2**30, 2) for k, (_, b) in got.items()}
    print(f"llama3_70b on {p} ranks, engine GiB by plan: {gib}")
    model = build_llama("llama3_70b")
    engine = YaFSDP(model, units_of(model), device="meta", memory_budget_bytes=held(layer) - 1)
    choice = engine.plan_choice
    assert (engine.buffer_plan.name, choice.rejected.name, choice.smallest.name) == (
        "lean_alternating", "separate_ends", "half_staging"
    )  # fmt: skip


@pytest.mark.parametrize(
    "plan", ["alternating", "lean_alternating", "ends_shared", "separate_ends", "half_staging"]
)
def test_a_named_plan_is_held_as_named_whatever_the_budget(fake_world: int, plan: str) -> None:
    """`plan_buffers` takes a named plan as named: its bytes are what the engine holds, the
    budget is recorded beside it, and no plan was chosen over it."""
    model = build_llama("tiny")
    engine = YaFSDP(model, units_of(model), device="meta", buffer_plan=plan,
                    memory_budget_bytes=1)  # fmt: skip
    choice = engine.plan_choice
    assert (choice.plan.name, choice.budget_bytes) == (plan, 1)
    assert (choice.rejected, choice.rejected_bytes) == (None, None)
    assert choice.plan_bytes == held_bytes(engine.memory_report())


def test_tied_weights_are_refused(fake_world: int) -> None:
    model = GPT()
    model.head.weight = model.wte.weight
    with pytest.raises(ValueError, match="'head.weight' is the same tensor as 'wte.weight'"):
        YaFSDP(model, units_of(model))


def test_overlapping_units_are_refused(fake_world: int) -> None:
    model = GPT()
    with pytest.raises(ValueError, match="share the submodule"):
        YaFSDP(model, [model.wte, model.blocks[0], model.blocks[0].fc, model.head])


def test_unit_outside_the_model_is_refused(fake_world: int) -> None:
    model = GPT()
    with pytest.raises(ValueError, match="not a submodule"):
        YaFSDP(model, [model.wte, torch.nn.Linear(2, 2), model.head])


def test_checkpointing_a_non_unit_is_refused(fake_world: int) -> None:
    model = GPT()
    with pytest.raises(ValueError, match="not a unit"):
        YaFSDP(model, units_of(model), ckpt_units=[model.ln_f])


def test_units_out_of_execution_order_are_refused(fake_world: int) -> None:
    model = build("gpt")
    units = units_of(model)
    engine = YaFSDP(model, [units[-1], *units[1:-1], units[0]], param_dtype=torch.float32)
    with pytest.raises(RuntimeError, match="must run in the order given"):
        engine(torch.zeros(1, 4, dtype=torch.long))


def test_norms_and_outside_params_are_resident(fake_world: int) -> None:
    model = build("gpt")
    engine = YaFSDP(model, units_of(model))
    resident = [s.name for s in engine.layout.resident.slots]
    assert "wpe" in resident and "ln_f.weight" in resident and "blocks.0.ln_1.bias" in resident
    in_units = [s.name for u in engine.layout.units for s in u.slots]
    assert not any("ln" in n for n in in_units) and "blocks.0.fc.bias" in in_units
    assert [s.name for s in engine.layout.frozen] == ["logit_scale"]


@pytest.mark.parametrize("fake_world", [4], indirect=True)
def test_meta_module_is_initialised_shard_by_shard(fake_world: int) -> None:
    """With init_fn, a meta-device model is never materialised: only the parameters that
    overlap this rank's shards are computed, and the shards hold exactly their values."""
    model = build_llama("tiny")  # meta
    names = [n for n, _ in model.named_parameters()]
    asked: list[str] = []

    def init_fn(name: str, shape: torch.Size) -> torch.Tensor:
        asked.append(name)
        return initial_value(name, shape, 0)

    engine = YaFSDP(
        model, units_of(model), param_dtype=torch.float32, device="cpu", init_fn=init_fn
    )
    assert len(asked) == len(set(asked)), "each parameter is computed at most once"
    assert 0 < len(asked) < len(names), "rank 0 of 4 needs only the parameters it shards"
    full = {n: initial_value(n, p.shape, 0) for n, p in build_llama("tiny").named_parameters()}
    for unit in engine.layout.units:
        start, end = unit.shard_range(0)
        flat = torch.cat([full[s.name].reshape(-1) for s in unit.slots])
        flat = torch.nn.functional.pad(flat, (0, unit.padded_numel - flat.numel()))
        shard = engine.buffers.master.data[
            unit.master_offset : unit.master_offset + unit.shard_numel
        ]
        assert torch.equal(shard, flat[start:end]), unit.name
