"""buffer_plan="split_vocab": the mechanism suite's two models at P = 1-4 against their
unsharded reference (`test_engine_parity`'s suite), then an odd vocabulary (uneven halves),
a padding row in the high half, a checkpointed embedding, the state dicts' names and
shapes, and the models it refuses, naming why."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from tests.distributed import run_on_ranks
from tests.yafsdp_impl.models import GPT, batch, loss_of
from tests.yafsdp_impl.scenarios import EPS
from tests.yafsdp_impl.test_engine_parity import (
    FP32,
    assert_dicts_close,
    assert_rel_close,
    count,
    models,
    params,
    reference,
    suite,
)
from yafsdp_impl import YaFSDP, split_vocab_units

# Reads test_engine_parity's cached rank suite (suite()): one xdist worker runs both.
WORKER_GROUP = "tests.yafsdp_impl.test_engine_parity"

ODD_VOCAB = 97  # halves of 49 and 48 rows
PADDING = 60  # a row of the high half: its gradient stays exactly zero
STEPS = 2
LR = 1e-3


@pytest.mark.slow  # the engine suite on ranks (suite() starts them; imported, so not seen)
@params
@models
def test_split_vocab_buffer_plan_matches_reference(ws: int, name: str) -> None:
    """The embedding and the output projection each split into two vocabulary halves, each
    a unit, the buffers alternating two of the largest of a layer and half an end: two more
    units, so a step makes 2U - 2 unit gathers (U counting the halves) and the norm one, and
    every half is reduce-scattered; losses, gradients keyed by the original names and
    shapes, clip norms, weights after three steps and accumulation all match the reference,
    and every rank's log is the same."""
    ref = reference(name, ws)
    runs = [r[name]["split_vocab"] for r in suite(ws)]
    whole = [r[name]["half_staging"] for r in suite(ws)][0]
    for rank, r in enumerate(runs):
        n = len(r["plan"].buffer_of)
        assert n == len(whole["plan"].buffer_of) + 2
        assert r["plan"].buffer_of == tuple(i % 2 for i in range(n))
        assert r["plan"].buffer_numel[0] == max(r["padded"])
        if name == "llama":  # its ends outsize a layer: the halves shrink the buffers
            assert max(r["padded"]) < max(whole["padded"])
        torch.testing.assert_close(r["losses"], [step[rank] for step in ref["losses"]], **FP32)
        torch.testing.assert_close(r["norms"], ref["norms"], rtol=1e-6, atol=0)
        assert_rel_close(r["final"], ref["final"], 1e-5)
        assert {k: v.shape for k, v in r["final"].items()} == {
            k: v.shape for k, v in ref["final"].items()
        }
        assert r["logs"] == runs[0]["logs"]
        for log in r["logs"]:
            assert count(log, "all_gather") == 2 * n - 2 + 1
            assert count(log, "reduce_scatter") >= n + 1
    assert_dicts_close(runs[0]["grads1"], ref["grads1"], **FP32)
    assert_dicts_close(runs[0]["accum_grads"], ref["grads1"], **FP32)


def odd_gpt(seed: int = 0) -> GPT:
    """The GPT test model with an odd vocabulary and a padding row."""
    torch.manual_seed(seed)
    model = GPT(n_layers=2)
    model.wte = nn.Embedding(ODD_VOCAB, 64, padding_idx=PADDING)
    model.head = nn.Linear(64, ODD_VOCAB)
    return model


def units(model: GPT) -> list[nn.Module]:
    return [model.wte, *model.blocks, model.head]


def sharded(rank: int, world_size: int) -> dict:
    model = odd_gpt()
    engine = YaFSDP(model, units(model), param_dtype=torch.float32, buffer_plan="split_vocab",
                    ckpt_units=2)  # fmt: skip
    opt = torch.optim.AdamW(engine.parameters(), lr=LR, eps=EPS)
    out: dict = {"losses": [], "rows": [u.slots[0].shape[0] for u in engine.layout.units]}
    for step in range(STEPS):
        loss = loss_of(engine, batch(ODD_VOCAB, step, rank))
        loss.backward()
        if step == 0:
            out["grads"] = engine.full_grad_dict()
        opt.step()
        opt.zero_grad()
        out["losses"].append(loss.item())
    out["final"] = engine.full_state_dict()
    out["optim"] = {k: v["exp_avg"].shape for k, v in engine.full_optim_state_dict(opt).items()}
    other_model = odd_gpt(seed=5)
    other = YaFSDP(other_model, units(other_model), param_dtype=torch.float32,
                   buffer_plan="split_vocab")  # fmt: skip
    other.load_full_state_dict(out["final"])
    back = other.full_state_dict()
    out["full_round_trip"] = all(torch.equal(back[k], v) for k, v in out["final"].items())
    return out


@functools.cache
def odd_reference(world_size: int) -> dict:
    """The unsharded model on every rank's batch, AdamW on the mean loss."""
    model = odd_gpt()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, eps=EPS)
    out: dict = {"losses": []}
    for step in range(STEPS):
        losses = [loss_of(model, batch(ODD_VOCAB, step, r)) for r in range(world_size)]
        (sum(losses) / world_size).backward()
        for p in params:
            if p.grad is None:  # unused: the engine reduces an exact zero, so it decays too
                p.grad = torch.zeros_like(p)
        if step == 0:
            out["grads"] = {
                n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
            }
        opt.step()
        opt.zero_grad()
        out["losses"].append([x.item() for x in losses])
    out["final"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    return out


@pytest.mark.parametrize("ws", [1, 2, 3])
def test_odd_vocabulary_splits_unevenly_and_matches_reference(ws: int) -> None:
    """97 rows: halves of 49 and 48, the padding row's gradient exactly zero, the embedding
    checkpointed; losses, gradients and weights after two steps match the unsharded model,
    and the full state dict (and the optimizer's) keeps the original names and shapes."""
    ref = odd_reference(ws)
    runs = run_on_ranks(sharded, ws, start_method="fork")
    for rank, r in enumerate(runs):
        assert r["rows"][:2] == [49, 48] and r["rows"][-2:] == [49, 48]
        torch.testing.assert_close(
            r["losses"], [s[rank] for s in ref["losses"]], rtol=1e-5, atol=1e-7
        )
        assert r["final"].keys() == ref["final"].keys()
        for k, want in ref["final"].items():  # as the parity suite: per-tensor relative
            assert (r["final"][k] - want).norm() <= 1e-5 * want.norm(), k
        assert r["full_round_trip"]
        assert r["optim"]["wte.weight"] == (ODD_VOCAB, 64)
    grads = runs[0]["grads"]
    assert torch.count_nonzero(grads["wte.weight"][PADDING]) == 0
    for k, want in ref["grads"].items():
        torch.testing.assert_close(grads[k], want, rtol=1e-5, atol=1e-7)


def test_refuses_ends_it_cannot_split() -> None:
    """Each refusal names the plan and what the model lacks."""
    model = GPT(n_layers=2)
    with pytest.raises(ValueError, match="split_vocab.*first unit.*nn.Embedding"):
        split_vocab_units([model.blocks[0], model.blocks[1], model.head])
    with pytest.raises(ValueError, match="split_vocab.*last unit.*nn.Linear"):
        split_vocab_units([model.wte, model.blocks[0], model.blocks[1]])
    model.head = nn.Linear(64, 10)
    with pytest.raises(ValueError, match="10 outputs, not the embedding's vocabulary of 96"):
        split_vocab_units([model.wte, *model.blocks, model.head])
    with pytest.raises(ValueError, match="at least three units"):
        split_vocab_units([model.wte, model.head])
    model.head = nn.Linear(64, 96, bias=False)
    model.head.weight = model.wte.weight
    with pytest.raises(ValueError, match="share one weight.*untie"):
        split_vocab_units([model.wte, *model.blocks, model.head])
