"""Every mechanism of the YaFSDP design note, at world sizes 1-4 on gloo, on two models.

One multi-rank run per world size (`engine_suite`) trains both models through every
scenario; the tests below compare its raw results with an unsharded fp32 reference
computed here. fp32: losses and reduced gradients to 1e-5 (elementwise relative); weights
to 1e-6 after one step from the same gradients, and to 1e-5 after three steps (per-tensor
relative norm of the difference; measured worst 8.6e-6, GPT at P=3).
bf16 tolerance: the loss within 2% of the fp32 reference; after 3 AdamW steps every weight
within 2 lr x steps (a bf16 rounding can flip the sign of a small gradient, and one step
moves a weight by about lr) and the whole weight vector within 1% relative.
"""

from __future__ import annotations

import functools

import pytest
import torch

from tests.distributed import run_on_ranks
from tests.yafsdp_impl.models import BATCH, batch, build, loss_of, vocab_of
from tests.yafsdp_impl.scenarios import EPS, LR, MAX_NORM, MODELS, STEPS, WEIGHT_DECAY, engine_suite

WORLD_SIZES = (1, 2, 3, 4)
FP32 = {"rtol": 1e-5, "atol": 1e-7}
BF16_WEIGHT_ATOL = 2 * LR * STEPS  # one AdamW step moves a weight by about lr at most
BF16_MODEL_REL = 1e-2


@functools.cache
def suite(world_size: int) -> list[dict]:
    return run_on_ranks(engine_suite, world_size, start_method="fork")


@functools.cache
def reference(name: str, world_size: int) -> dict:
    """The unsharded fp32 model on every rank's batch, same optimizer and clipping."""
    model = build(name)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    opt = torch.optim.AdamW(params.values(), lr=LR, weight_decay=WEIGHT_DECAY, eps=EPS)
    vocab = vocab_of(model)
    out: dict = {"initial": {n: p.detach().clone() for n, p in model.named_parameters()}}
    out["losses"], out["norms"] = [], []
    for step in range(STEPS):
        losses = [loss_of(model, batch(vocab, step, r)) for r in range(world_size)]
        (sum(losses) / world_size).backward()
        for p in params.values():
            if p.grad is None:  # unused: the engine reports exactly zero
                p.grad = torch.zeros_like(p)
        if step == 0:
            out["grads1"] = {n: p.grad.clone() for n, p in params.items()}
        out["norms"].append(clip_fp64(list(params.values()), MAX_NORM))
        opt.step()
        opt.zero_grad()
        out["losses"].append([x.item() for x in losses])
        if step == 0:
            out["after1"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    out["final"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    out["optim"] = {n: opt.state[p] for n, p in params.items()}
    return out


def clip_fp64(params: list[torch.Tensor], max_norm: float) -> float:
    """torch.nn.utils.clip_grad_norm_ with the norm accumulated in fp64."""
    norm = torch.stack([p.grad.double().norm() for p in params]).norm()
    coef = (max_norm / (norm + 1e-6)).clamp(max=1.0).float()
    for p in params:
        p.grad.mul_(coef)
    return norm.item()


def local_grads_sum(name: str, world_size: int, micro: int) -> dict[str, torch.Tensor]:
    """sum over ranks and micro-batches of each local mean-loss gradient, / (P x micro)."""
    total: dict[str, torch.Tensor] = {}
    for r in range(world_size):
        tokens = batch(vocab_of(build(name)), 0, r)
        for m in range(micro):
            model = build(name)
            loss_of(model, tokens[m * (BATCH // micro) : (m + 1) * (BATCH // micro)]).backward()
            for n, p in model.named_parameters():
                if p.requires_grad:
                    g = p.grad if p.grad is not None else torch.zeros_like(p)
                    total[n] = total.get(n, 0) + g
    return {n: g / (world_size * micro) for n, g in total.items()}


def assert_rel_close(got: dict, want: dict, rel: float) -> None:
    """Per tensor: ||got - want|| <= rel * ||want||.

    Used after several AdamW steps: Adam divides by sqrt(v), so a gradient element near 0
    turns last-bit differences in summation order into an lr-sized step; elementwise
    relative tolerance is meaningless there, the tensor's relative error is not.
    """
    assert got.keys() == want.keys()
    for k in want:
        err = (got[k].double() - want[k].double()).norm() / want[k].double().norm().clamp(min=1e-30)
        assert err <= rel, f"{k}: relative error {err:.2e} > {rel:.0e}"


def assert_dicts_close(got: dict, want: dict, **tol) -> None:
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k], msg=lambda m, k=k: f"{k}: {m}", **tol)


def count(log: list, op: str) -> int:
    return sum(1 for e in log if e[0] == op)


params = pytest.mark.parametrize("ws", WORLD_SIZES)
models = pytest.mark.parametrize("name", MODELS)


@params
@models
def test_gathered_shards_equal_the_original_model(ws: int, name: str) -> None:
    """ragged flat shards: gathering every rank's shard rebuilds the original weights."""
    for r in suite(ws):
        assert_dicts_close(r[name]["initial"], reference(name, ws)["initial"], rtol=0, atol=0)
        assert r[name]["padding"]["shards_sum_to_padded"]
        assert r[name]["padding"]["master_padding_zero"]  # still 0 after 3 AdamW steps


@params
@models
def test_losses_match_reference_under_injected_delays(ws: int, name: str) -> None:
    """event ordering: compute(1) and backward(2) sleep while other buffers fill; no effect."""
    ref = reference(name, ws)
    for rank, r in enumerate(suite(ws)):
        want = [step[rank] for step in ref["losses"]]
        torch.testing.assert_close(r[name]["losses"], want, **FP32)


@params
@models
def test_reduced_gradients_match_reference(ws: int, name: str) -> None:
    """fp32 reduction and a single division: grads equal the mean over all ranks' batches."""
    assert_dicts_close(suite(ws)[0][name]["grads1"], reference(name, ws)["grads1"], **FP32)


@params
@models
def test_one_step_equals_fp32_master_adamw(ws: int, name: str) -> None:
    """The flat fp32 master + one AdamW step over two flat shards equals per-parameter fp32
    AdamW on the unsharded weights, fed the same reduced gradients (those are proven equal
    to the reference's by test_reduced_gradients_match_reference)."""
    r = suite(ws)[0][name]
    weights = {n: w.clone().requires_grad_(True) for n, w in r["initial"].items()}
    trainable = {n: w for n, w in weights.items() if n in r["grads1"]}
    for n, w in trainable.items():
        w.grad = r["grads1"][n].clone()
    clip_fp64(list(trainable.values()), MAX_NORM)
    torch.optim.AdamW(trainable.values(), lr=LR, weight_decay=WEIGHT_DECAY, eps=EPS).step()
    want = {n: w.detach() for n, w in weights.items()}
    assert_dicts_close(r["after1"], want, rtol=1e-6, atol=1e-9)


@params
@models
def test_weights_and_optimizer_state_after_three_steps(ws: int, name: str) -> None:
    """full state dict after 3 steps equals the reference model's; so does AdamW's state."""
    ref = reference(name, ws)
    for r in suite(ws):
        assert_rel_close(r[name]["final"], ref["final"], 1e-5)
    got = suite(ws)[0][name]["optim"]
    for key in ("exp_avg", "exp_avg_sq"):
        want = {n: state[key] for n, state in ref["optim"].items()}
        assert_rel_close({n: got[n][key] for n in want}, want, 1e-5)


@params
@models
def test_clip_grad_norm_equals_reference(ws: int, name: str) -> None:
    for r in suite(ws):
        torch.testing.assert_close(
            r[name]["norms"], reference(name, ws)["norms"], rtol=1e-6, atol=0
        )


@params
@models
def test_clip_reads_no_gradient_and_reduces_one_scalar(ws: int, name: str) -> None:
    """the shard norms are summed during backward: clipping only scales the gradients
    (no op but the in-place scale touches a gradient-sized tensor) after one all-reduce;
    with accumulation the norm is that of the final gradient."""
    for r in suite(ws):
        assert r[name]["clip_reads"] == ["aten.mul_.Tensor"]
        assert all(count(log, "all_reduce") == 1 for log in r[name]["logs"])
        want = reference(name, ws)["norms"][0]
        torch.testing.assert_close(r[name]["accum"]["norm"], want, rtol=1e-6, atol=0)


@params
@models
def test_local_state_dict_round_trips_bitwise(ws: int, name: str) -> None:
    for r in suite(ws):
        assert r[name]["roundtrip"] == {
            "loaded_equal": True,
            "continued_equal": True,
            "full_equal": True,
        }


@params
@models
def test_bf16_within_documented_tolerance(ws: int, name: str) -> None:
    ref = reference(name, ws)
    for rank, r in enumerate(suite(ws)):
        for key in ("bf16", "bf16_reduce"):
            want = [step[rank] for step in ref["losses"]]
            torch.testing.assert_close(r[name][key]["losses"], want, rtol=2e-2, atol=0)
            got, want = r[name][key]["final"], ref["final"]
            assert_dicts_close(got, want, rtol=0, atol=BF16_WEIGHT_ATOL)
            flat = lambda d: torch.cat([d[k].flatten() for k in sorted(d)])  # noqa: E731
            assert_rel_close({"all": flat(got)}, {"all": flat(want)}, BF16_MODEL_REL)


@params
@models
def test_gathers_wait_for_master_to_bf16_copy(ws: int, name: str) -> None:
    """with the copy slowed, every step's first gathers hold the updated weights."""
    for r in suite(ws):
        assert r[name]["bf16"]["gathered_fresh"] == [True] * STEPS


@params
@models
def test_collective_logs_identical_on_all_ranks(ws: int, name: str) -> None:
    runs = suite(ws)
    for key in ("logs",):
        assert all(r[name][key] == runs[0][name][key] for r in runs)
    assert all(r[name]["accum"]["logs"] == runs[0][name]["accum"]["logs"] for r in runs)
    assert all(r[name]["ckpt"]["log"] == runs[0][name]["ckpt"]["log"] for r in runs)


@params
@models
def test_units_are_named_by_their_module_paths(ws: int, name: str) -> None:
    """The log (and so the ranges) name each unit by its path in the model, as FSDP2 does."""
    r = suite(ws)[0][name]
    first, layers, last = {"llama": ("tok_embeddings", "layers", "output"),
                           "gpt": ("wte", "blocks", "head")}[name]  # fmt: skip
    layer_names = [f"{layers}.{i}" for i in range(r["n_units"] - 2)]
    assert r["unit_names"] == [first, *layer_names, last]
    assert {u for op, u in r["logs"][0] if op == "forward"} == set(r["unit_names"])


@params
@models
def test_all_gathers_per_step_is_2u_minus_1(ws: int, name: str) -> None:
    """no re-gather of the last two units: 2U - 2 unit gathers plus one norm gather."""
    r = suite(ws)[0][name]
    u = r["n_units"]
    for log in r["logs"]:
        assert count(log, "all_gather") == 2 * u - 2 + 1
        assert [e for e in log if e == ("all_gather", "resident")] == [("all_gather", "resident")]


@params
@models
def test_lazy_reduce_scatter(ws: int, name: str) -> None:
    """RS(u) is issued once unit u-2's backward starts; two unit RS and the norm RS remain."""
    r = suite(ws)[0][name]
    u, U = r["n_units"], r["unit_names"]
    log = r["logs"][0]
    for unit in range(2, u):
        issued = log.index(("reduce_scatter", U[unit]))
        started = log.index(("backward", U[unit - 2]))
        following = [e for e in log[started + 1 :] if e[0] == "backward"][:1]
        assert started < issued
        assert not following or issued < log.index(following[0])
    tail = log[log.index(("backward", U[0])) + 1 :]
    assert [e for e in tail if e[0] == "reduce_scatter"] == [
        ("reduce_scatter", U[2]),  # the lazy one, as unit 0 takes over its buffer
        ("reduce_scatter", U[1]),
        ("reduce_scatter", U[0]),
        ("reduce_scatter", "resident"),
    ]
    assert count(log, "reduce_scatter") == u + 1


def in_flight_reduce_scatters(log: list[tuple[str, str]]) -> list[list[str]]:
    """Replay a step's log: the unit reduce-scatters issued and not yet waited, as each is
    issued. Waits must come in issue order (checked here)."""
    pending: list[str] = []
    seen = []
    for op, unit in log:
        if op == "reduce_scatter":
            pending.append(unit)
            seen.append(list(pending))
        elif op == "wait_reduce_scatter":
            assert pending and pending[0] == unit, f"{unit} waited before {pending[:1]}"
            pending.pop(0)
    assert pending == []  # the end of backward waits for everything it issued
    return seen


@params
@models
def test_final_reduce_scatters_overlap_each_other_and_unit0_backward(ws: int, name: str) -> None:
    """End of backward, on the step's last micro-batch: weight buffers the backward has
    passed are lent as staging lanes, so the last units' reduce-scatters do not queue on the
    one staging buffer. Every reduce-scatter issued once unit 0's backward starts (and the
    resident one) is issued before the first of them is waited; unit 2's goes out before the
    end of backward, and on the GPT model with ends_shared (where no later unit uses unit
    2's buffer) already during unit 1's backward; with ends_shared on the Llama the output
    unit's chunks go out as the layers' backward starts (the output's weight buffer is free
    until unit 0 is gathered), not at unit 0. The lanes are views into the weight buffers;
    results equal the reference."""
    ref = reference(name, ws)
    r = suite(ws)[0][name]
    U = r["unit_names"]
    assert r["lanes_inside_weight_buffers"] == [1, 1]  # fp32: each buffer is staging-sized
    for log in [*r["logs"], *r["ends_shared"]["logs"]]:
        in_flight_reduce_scatters(log)
        start, end = log.index(("backward", U[0])), log.index(("end_backward", "all"))
        final = [i for i, e in enumerate(log) if e[0] == "reduce_scatter" and i > start]
        final_units = {log[i][1] for i in final}
        waits = [i for i, (op, u) in enumerate(log) if op == "wait_reduce_scatter"]
        first_wait = min(i for i in waits if log[i][1] in final_units)
        assert len(final) >= 3 and max(final) < first_wait
        assert log.index(("backward", U[1])) < log.index(("reduce_scatter", U[2])) < end
    if name == "gpt":  # lanes are free then: unit 2 goes out as unit 1's backward starts
        shared = r["ends_shared"]["logs"][0]
        assert shared.index(("reduce_scatter", U[2])) < shared.index(("backward", U[0]))
    if name == "llama":
        assert r["ends_shared"]["lanes"][0] >= 1  # the output's buffer lends a lane
        log = r["ends_shared"]["logs"][0]
        last = U[-1]
        issued = [i for i, e in enumerate(log) if e == ("reduce_scatter", last)]
        assert len(issued) > 1  # chunked
        assert max(issued) < log.index(("backward", U[-3]))
    assert_dicts_close(r["grads1"], ref["grads1"], **FP32)
    assert_dicts_close(r["ends_shared"]["grads1"], ref["grads1"], **FP32)


@params
@models
def test_accumulation_equals_one_larger_batch(ws: int, name: str) -> None:
    """4 micro-batches of 1 equal one batch of 4; every micro-batch reduce-scatters once per
    unit, the norm unit only at the end, and micro-batches 2-4 reuse units 0 and 1."""
    r = suite(ws)[0][name]
    assert_dicts_close(r["accum"]["grads"], r["grads1"], **FP32)
    u = r["n_units"]
    logs = r["accum"]["logs"]
    assert [count(log, "reduce_scatter") for log in logs] == [u] * (BATCH - 1) + [u + 1]
    assert count(logs[0], "all_gather") == 2 * u - 1
    assert all(count(log, "all_gather") == 2 * u - 4 for log in logs[1:])


@params
@models
def test_single_division_by_ranks_times_accumulation(ws: int, name: str) -> None:
    got = suite(ws)[0][name]["accum"]["grads"]
    assert_dicts_close(got, local_grads_sum(name, ws, BATCH), **FP32)


@params
def test_unused_parameter_gets_exactly_zero(ws: int) -> None:
    grads = suite(ws)[0]["gpt"]["grads1"]
    unused = [n for n in grads if ".unused." in n]
    assert unused and all(torch.count_nonzero(grads[n]) == 0 for n in unused)


@params
@models
def test_checkpointing_changes_no_gradient_and_no_gather_count(ws: int, name: str) -> None:
    r = suite(ws)[0][name]
    assert_dicts_close(r["ckpt"]["grads"], r["grads1"], rtol=1e-6, atol=1e-8)
    assert count(r["ckpt"]["log"], "all_gather") == count(r["logs"][0], "all_gather")


@params
@models
def test_params_are_views_into_alternating_buffers(ws: int, name: str) -> None:
    facts = suite(ws)[0][name]["aliasing"]
    assert all(facts["inside_own_buffer"]) and all(facts["grad_inside_own_buffer"])
    assert facts["i_and_i+2_share"] and not facts["i_and_i+1_share"]


@params
def test_two_buffers_whatever_the_depth(ws: int) -> None:
    sizes = suite(ws)[0]["two_buffers"]
    assert sizes[4] == sizes[32] > 0


@params
@models
def test_no_steady_state_allocation_for_weights_or_grads(ws: int, name: str) -> None:
    """after step 1 the engine's own code allocates nothing beyond scalars (the clip norm),
    and every weight and gradient still lives in the same storage."""
    for r in suite(ws):
        big = [a for a in r[name]["engine_allocations"] if a[1] > 16]
        assert big == []
        assert r[name]["storages_before"] == r[name]["storages_after"]


@params
@models
@pytest.mark.parametrize("plan", ["ends_shared", "lean_alternating", "half_staging"])
def test_staged_buffer_plans_match_reference(ws: int, name: str, plan: str) -> None:
    """ends_shared (first and last units in one buffer, the rest alternating two),
    lean_alternating (two largest-unit buffers, a layer-sized staging) and half_staging (a
    staging of half a layer): every unit larger than the staging is reduce-scattered in
    chunks of P x staging/P, and losses, gradients, clip norms, weights after three steps
    and accumulation all match the reference, and every rank's log is the same."""
    ref = reference(name, ws)
    runs = [r[name][plan] for r in suite(ws)]
    U = suite(ws)[0][name]["unit_names"]
    for rank, r in enumerate(runs):
        n = len(r["plan"].buffer_of)
        if plan == "ends_shared":
            assert r["plan"].buffer_of[0] == r["plan"].buffer_of[-1] == 0
            assert all(r["plan"].buffer_of[i] in (1, 2) for i in range(1, n - 1))
        torch.testing.assert_close(r["losses"], [step[rank] for step in ref["losses"]], **FP32)
        torch.testing.assert_close(r["norms"], ref["norms"], rtol=1e-6, atol=0)
        assert_rel_close(r["final"], ref["final"], 1e-5)
        assert r["logs"] == runs[0]["logs"]
    assert_dicts_close(runs[0]["grads1"], ref["grads1"], **FP32)
    assert_dicts_close(runs[0]["accum_grads"], ref["grads1"], **FP32)
    log, chosen = runs[0]["logs"][0], runs[0]["plan"]
    chunk = chosen.staging_numel // ws
    pieces = [-(-padded // ws // chunk) for padded in runs[0]["padded"]]
    for i, want in enumerate(pieces):
        assert count([e for e in log if e[1] == U[i]], "reduce_scatter") == want
    if name == "llama":  # its embedding and output outsize a layer
        assert pieces[0] > 1
    if plan == "half_staging":  # one more reduce-scatter per layer
        assert pieces[1:-1] == [2] * (n - 2)


@params
@models
def test_separate_ends_buffer_plan_matches_reference(ws: int, name: str) -> None:
    """first and last units in a buffer each, the rest alternating two: the first unit stays
    gathered from its forward to its backward, as do the output and the last two layers, so
    a step makes 2U - 4 unit gathers and the norm one (2U - 2 with alternating buffers,
    2U - 3 with ends_shared); losses, gradients, clip norms, weights after
    three steps and accumulation all match the reference, and every rank's log is the same."""
    ref = reference(name, ws)
    runs = [r[name]["separate_ends"] for r in suite(ws)]
    U = suite(ws)[0][name]["unit_names"]
    for rank, r in enumerate(runs):
        n = len(r["plan"].buffer_of)
        assert r["plan"].buffer_of[0] == 0 and r["plan"].buffer_of[-1] == 1
        assert all(r["plan"].buffer_of[i] in (2, 3) for i in range(1, n - 1))
        torch.testing.assert_close(r["losses"], [step[rank] for step in ref["losses"]], **FP32)
        torch.testing.assert_close(r["norms"], ref["norms"], rtol=1e-6, atol=0)
        assert_rel_close(r["final"], ref["final"], 1e-5)
        assert r["logs"] == runs[0]["logs"]
        for log in r["logs"]:
            assert count(log, "all_gather") == 2 * n - 4 + 1
            assert [e for e in log if e == ("all_gather", U[0])] == [("all_gather", U[0])]
    assert_dicts_close(runs[0]["grads1"], ref["grads1"], **FP32)
    assert_dicts_close(runs[0]["accum_grads"], ref["grads1"], **FP32)


@params
@models
def test_the_step_opens_with_its_first_gathers_and_closes_with_the_norms_all_reduce(
    ws: int, name: str
) -> None:
    """A step opens by copying to the param dtype only what its first gathers read (the
    resident unit's and units 0 and 1's shards), issuing those three gathers, and only then
    copying the other shards; after the optimizer step (prefetch_after) as at a forward.
    It closes with the all-reduce of the gradients' squared norm, issued as the backward
    ends (the last shard's norm known), so that clipping issues no collective of its own."""
    r, U = suite(ws)[0][name]["step_ends"], suite(ws)[0][name]["unit_names"]
    for k in range(0, len(r["copies"]), 2):
        (first, log_a), (rest, log_b) = r["copies"][k : k + 2]
        assert (first, rest) == ("first", "rest")
        assert log_b[len(log_a) :] == [("all_gather", u) for u in ("resident", U[0], U[1])]
    assert len(r["copies"]) == 2 * 3  # the first forward, then after each optimizer step
    assert r["after_backward"] == [("all_reduce", "clip")] * 2
    assert r["clip_added"] == [[], []]


@params
@models
def test_prefetched_gathers_start_after_the_step_and_hold_updated_weights(
    ws: int, name: str
) -> None:
    """prefetch_after(opt): the resident and the first two units are gathered right after
    the optimizer step (after the slowed master-to-bf16 copy), hold the updated weights when
    the next forward starts, are not gathered again, and the losses stay in tolerance."""
    ref = reference(name, ws)
    u, U = suite(ws)[0][name]["n_units"], suite(ws)[0][name]["unit_names"]
    prefetched = [("all_gather", "resident"), ("all_gather", U[0]), ("all_gather", U[1])]
    runs = [r[name]["bf16_prefetch"] for r in suite(ws)]
    for rank, r in enumerate(runs):
        assert r["gathered_fresh"] == [True] * STEPS
        assert r["first_unit_fresh"] == [True] * STEPS
        want = [step[rank] for step in ref["losses"]]
        torch.testing.assert_close(r["losses"], want, rtol=2e-2, atol=0)
        assert r["logs"] == runs[0]["logs"]
        for step, log in enumerate(r["logs"]):
            assert log[-3:] == prefetched  # issued once the step returned
            if step > 0:
                assert log[0] == ("forward", U[0])  # nothing left to gather first
            assert count(log, "all_gather") == 2 * u - 1 + (3 if step == 0 else 0)


@params
@models
def test_wait_in_flight_returns_with_the_prefetched_gathers_landed(ws: int, name: str) -> None:
    """wait_in_flight() after prefetch_next_step(): the other ranks join the gathers late, so
    just after the prefetch rank 0's first two weight buffers are not yet updated (with two
    or more ranks); just after the wait they hold the updated weights."""
    r = suite(ws)[0][name]["prefetch_wait"]
    assert r["fresh_after_wait"]
    if ws > 1:
        assert not r["fresh_before_wait"]
