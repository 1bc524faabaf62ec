"""What each rank runs: every engine scenario for one world size, results returned raw.

The unsharded reference and the assertions live in the test module; ranks only train and
report, so a single multi-rank start-up serves every mechanism test of a world size.
"""

from __future__ import annotations

import contextlib
import copy
import time

import torch
import torch.distributed as dist

from tests.yafsdp_impl.census import EngineAllocations, LargeReads
from tests.yafsdp_impl.models import BATCH, batch, build, loss_of, units_of, vocab_of
from yafsdp_impl import YaFSDP

# The mechanisms are checked on the published layout (YaFSDP v1's two alternating buffers);
# the other plans have tests of their own (test_staged_buffer_plans_match_reference).
PLAN = "alternating"

MODELS = ("gpt", "llama")
LR = 1e-3
WEIGHT_DECAY = 0.1
# AdamW's first steps move every weight by ~lr * sign(g). With eps=1e-8, gradient elements
# that are pure rounding noise (|g| ~ 1e-10, from cancellation) get random-sign lr steps,
# so two correct implementations that sum in different orders differ by 2 lr there.
# eps=1e-6 damps those steps to ~1e-4 lr and lets the comparison see the engine itself.
EPS = 1e-6
MAX_NORM = 0.5
STEPS = 3
DELAY_S = 0.02
PREFETCH_LATE_S = 0.3


def optimizer(engine: YaFSDP) -> torch.optim.Optimizer:
    return torch.optim.AdamW(engine.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, eps=EPS)


def storages(engine: YaFSDP) -> list[int]:
    """Addresses of everything that holds weights or gradients."""
    ptrs = [p.data_ptr() for p in engine.module.parameters()]
    ptrs += [p.grad.data_ptr() for p in engine.module.parameters() if p.grad is not None]
    b = engine.buffers
    ptrs += [t.data_ptr() for t in (*b.weight, *b.grad, b.master, b.master_grad)]
    return ptrs


def aliasing(engine: YaFSDP) -> dict[str, object]:
    b = engine.buffers

    def inside(p: torch.Tensor, buf: torch.Tensor) -> bool:
        lo = buf.data_ptr()
        return lo <= p.data_ptr() and p.data_ptr() + p.numel() * p.element_size() <= (
            lo + buf.numel() * buf.element_size()
        )

    units = units_of(engine.module)
    facts = {"inside_own_buffer": [], "grad_inside_own_buffer": []}
    for i, unit in enumerate(units):
        ps = [p for p in unit.parameters() if p.requires_grad]
        ps = [p for p in ps if not inside(p, b.resident_weight)]
        facts["inside_own_buffer"].append(all(inside(p, b.weight[i % 2]) for p in ps))
        facts["grad_inside_own_buffer"].append(all(inside(p.grad, b.grad[i % 2]) for p in ps))
    first = lambda m: next(p for p in m.parameters() if not inside(p, b.resident_weight))  # noqa: E731
    facts["i_and_i+2_share"] = first(units[0]).data_ptr() == first(units[2]).data_ptr()
    facts["i_and_i+1_share"] = (
        first(units[0]).untyped_storage().data_ptr() == first(units[1]).untyped_storage().data_ptr()
    )
    return facts


def _delay_backward(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    """Sleep when the unit's input gradient is computed, i.e. inside the unit's backward."""
    for t in [*args, *kwargs.values()]:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            t.register_hook(lambda g: time.sleep(DELAY_S))


def train_fp32(name: str, rank: int) -> tuple[dict, YaFSDP, torch.optim.Optimizer]:
    """3 steps with clipping and injected compute delays; everything the parity tests need."""
    model = build(name)
    engine = YaFSDP(model, units_of(model), param_dtype=torch.float32, buffer_plan=PLAN)
    units = units_of(model)
    # Delays inside compute(1) (forward) and compute(2) (backward): gathers of other units
    # into the other buffer run meanwhile and must not disturb what unit 1/2 reads.
    units[1].register_forward_pre_hook(lambda *a: time.sleep(DELAY_S))
    units[2].register_forward_pre_hook(_delay_backward, with_kwargs=True)
    opt = optimizer(engine)
    vocab = vocab_of(model)
    out: dict = {"aliasing": aliasing(engine), "losses": [], "norms": [], "logs": []}
    out["initial"] = engine.full_state_dict()
    census = EngineAllocations()
    for step in range(STEPS):
        engine.schedule_log.clear()
        if step == 1:
            out["storages_before"] = storages(engine)
        mode = census if step >= 1 else contextlib.nullcontext()
        with mode:
            loss = loss_of(engine, batch(vocab, step, rank))
            loss.backward()
        if step == 0:
            out["grads1"] = engine.full_grad_dict()
        reads = LargeReads(len(engine.layout.units) + 1)
        with mode, reads:
            out["norms"].append(engine.clip_grad_norm_(MAX_NORM).item())
        out["clip_reads"] = sorted(reads.ops)
        with mode:
            opt.step()
            opt.zero_grad()
        out["losses"].append(loss.item())
        out["logs"].append(list(engine.schedule_log))
        if step == 0:
            out["after1"] = engine.full_state_dict()
    out["storages_after"] = storages(engine)
    out["engine_allocations"] = census.allocations
    out["final"] = engine.full_state_dict()
    out["optim"] = engine.full_optim_state_dict(opt)
    out["memory"] = engine.memory_report(opt)
    out["lanes_inside_weight_buffers"] = lanes_inside_weight_buffers(engine)
    out["padding"] = padding_facts(engine)
    return out, engine, opt


def lanes_inside_weight_buffers(engine: YaFSDP) -> list[int]:
    """How many staging lanes each weight buffer lends, once every lane is checked to lie
    inside its buffer (so the lanes hold no bytes of their own)."""
    counts = []
    for k, lanes in enumerate(engine.schedule.weight_lanes):
        w = engine.buffers.weight[k]
        lo, hi = w.data_ptr(), w.data_ptr() + w.numel() * w.element_size()
        for lane in lanes:
            for t in (lane.full, lane.out):
                if t is not None:
                    end = t.data_ptr() + t.numel() * t.element_size()
                    assert lo <= t.data_ptr() and end <= hi, f"lane outside weight buffer {k}"
        counts.append(len(lanes))
    return counts


def padding_facts(engine: YaFSDP) -> dict[str, object]:
    lay, b = engine.layout, engine.buffers
    shard_sums = [u.shard_numel * u.world_size == u.padded_numel for u in lay.units]
    master_pad = []
    for u in [*lay.units, lay.resident]:
        shard = b.resident_master if u is lay.resident else b.master[b.master_shard(u)]
        start, _ = u.shard_range(engine.rank)
        pad_from = max(u.numel - start, 0)
        master_pad.append(bool((shard[pad_from:] == 0).all()))
    return {"shards_sum_to_padded": all(shard_sums), "master_padding_zero": all(master_pad)}


def roundtrip(engine: YaFSDP, opt: torch.optim.Optimizer, name: str, rank: int) -> dict:
    """Local state dict + optimizer state into a fresh engine: continuing must agree bitwise."""
    local, osd = engine.local_state_dict(), copy.deepcopy(opt.state_dict())
    fresh_model = build(name, seed=123)
    fresh = YaFSDP(fresh_model, units_of(fresh_model), param_dtype=torch.float32, buffer_plan=PLAN)
    fresh_opt = optimizer(fresh)
    fresh.load_local_state_dict(local)
    fresh_opt.load_state_dict(osd)
    loaded_equal = torch.equal(fresh.buffers.master, engine.buffers.master)
    vocab = vocab_of(fresh_model)
    for e, o in ((engine, opt), (fresh, fresh_opt)):
        loss_of(e, batch(vocab, STEPS, rank)).backward()
        o.step()
    after = torch.equal(fresh.buffers.master, engine.buffers.master) and torch.equal(
        fresh.buffers.resident_master, engine.buffers.resident_master
    )
    # Full state dict: load into yet another engine and read back.
    other_model = build(name, seed=7)
    other = YaFSDP(other_model, units_of(other_model), param_dtype=torch.float32, buffer_plan=PLAN)
    full = engine.full_state_dict()
    other.load_full_state_dict(full)
    back = other.full_state_dict()
    full_equal = all(torch.equal(full[k], back[k]) for k in full) and full.keys() == back.keys()
    return {"loaded_equal": loaded_equal, "continued_equal": after, "full_equal": full_equal}


def train_bf16(name: str, rank: int, reduce_dtype: torch.dtype, prefetch: bool = False) -> dict:
    """bf16 weights; the master-to-bf16 copy is slowed, and the gathered weights must still
    be the updated ones at the first forward of every step. With `prefetch`, the next step's
    first gathers start when the optimizer step returns; unit 0's weights are then checked as
    its forward starts, and each step's log is kept."""
    model = build(name)
    engine = YaFSDP(
        model,
        units_of(model),
        param_dtype=torch.bfloat16,
        reduce_dtype=reduce_dtype,
        buffer_plan=PLAN,
    )
    copy_master = engine.schedule.copy_master_to_param_dtype

    def slow_copy(part: str = "all") -> None:
        time.sleep(DELAY_S)
        copy_master(part)

    engine.schedule.copy_master_to_param_dtype = slow_copy
    opt = optimizer(engine)
    if prefetch:
        engine.prefetch_after(opt)
    vocab = vocab_of(model)
    losses, fresh, logs, first_fresh = [], [], [], []
    last_unit, first_unit = engine.layout.units[-1], engine.layout.units[0]
    want_first: list[torch.Tensor] = []

    def check_first(module: torch.nn.Module, args: tuple) -> None:
        held = [s.module._parameters[s.attr].detach() for s in first_unit.slots]
        first_fresh.append(all(torch.equal(h, w) for h, w in zip(held, want_first, strict=True)))

    units_of(model)[0].register_forward_pre_hook(check_first)
    for step in range(STEPS):
        engine.schedule_log.clear()
        full = engine.full_state_dict()
        want_first[:] = [full[s.name].to(torch.bfloat16) for s in first_unit.slots]
        loss = loss_of(engine, batch(vocab, step, rank))
        # Weights in the buffers now must be bf16(master) of this step.
        full = engine.full_state_dict()
        held = [s.module._parameters[s.attr] for s in last_unit.slots]
        want = [full[s.name].to(torch.bfloat16) for s in last_unit.slots]
        fresh.append(all(torch.equal(h.detach(), w) for h, w in zip(held, want, strict=True)))
        loss.backward()
        engine.clip_grad_norm_(MAX_NORM)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        logs.append(list(engine.schedule_log))
    return {
        "losses": losses,
        "final": engine.full_state_dict(),
        "gathered_fresh": fresh,
        "first_unit_fresh": first_fresh,
        "logs": logs,
    }


def prefetch_then_wait(name: str, rank: int) -> dict:
    """One fp32 step, then `prefetch_next_step()` and `wait_in_flight()`, with every rank
    but 0 late to the prefetch by PREFETCH_LATE_S, so rank 0's gathers cannot land before
    then. Rank 0 copies units 0 and 1's weight buffers right after issuing the prefetch and
    right after the wait; both are compared with the updated weights."""
    model = build(name)
    engine = YaFSDP(model, units_of(model), param_dtype=torch.float32, buffer_plan=PLAN)
    opt = optimizer(engine)
    loss_of(engine, batch(vocab_of(model), 0, rank)).backward()
    opt.step()
    b, units = engine.buffers, engine.layout.units
    held = lambda: [b.weight[b.buffer_of[i]][: units[i].numel].clone() for i in (0, 1)]  # noqa: E731
    dist.barrier()
    if rank != 0:
        time.sleep(PREFETCH_LATE_S)
    engine.prefetch_next_step()
    before_wait = held()
    engine.wait_in_flight()
    after_wait = held()
    full = engine.full_state_dict()
    want = [torch.cat([full[s.name].flatten() for s in units[i].slots]) for i in (0, 1)]
    same = lambda got: all(torch.equal(g, w) for g, w in zip(got, want, strict=True))  # noqa: E731
    return {"fresh_before_wait": same(before_wait), "fresh_after_wait": same(after_wait)}


def step_ends(name: str, rank: int) -> dict:
    """bf16, two steps with prefetch_after: where the param-dtype copies fall among the
    step's first gathers, and the log as backward returns and after clipping."""
    model = build(name)
    engine = YaFSDP(model, units_of(model), param_dtype=torch.bfloat16, buffer_plan=PLAN)
    copy_master = engine.schedule.copy_master_to_param_dtype
    copies: list[tuple[str, list]] = []

    def spy_copy(part: str = "all") -> None:
        copies.append((part, list(engine.collective_log)))
        copy_master(part)

    engine.schedule.copy_master_to_param_dtype = spy_copy
    opt = optimizer(engine)
    engine.prefetch_after(opt)
    vocab = vocab_of(model)
    out: dict = {"after_backward": [], "clip_added": []}
    for step in range(2):
        engine.schedule_log.clear()
        loss_of(engine, batch(vocab, step, rank)).backward()
        out["after_backward"].append(engine.schedule_log[-1])
        before = len(engine.collective_log)
        engine.clip_grad_norm_(MAX_NORM)
        out["clip_added"].append(engine.collective_log[before:])
        opt.step()
    out["copies"] = copies
    return out


def train_accum(name: str, rank: int, micro: int) -> dict:
    """One step of `micro` micro-batches of one sequence each, from the same BATCH tokens."""
    model = build(name)
    engine = YaFSDP(
        model, units_of(model), param_dtype=torch.float32, grad_accum_steps=micro, buffer_plan=PLAN
    )
    tokens = batch(vocab_of(model), 0, rank)
    logs = []
    for m in range(micro):
        engine.schedule_log.clear()
        loss_of(engine, tokens[m * (BATCH // micro) : (m + 1) * (BATCH // micro)]).backward()
        logs.append(list(engine.collective_log))
    grads = engine.full_grad_dict()
    return {"grads": grads, "logs": logs, "norm": engine.clip_grad_norm_(MAX_NORM).item()}


def train_ckpt(name: str, rank: int, n: int) -> dict:
    model = build(name)
    engine = YaFSDP(
        model, units_of(model), param_dtype=torch.float32, ckpt_units=n, buffer_plan=PLAN
    )
    loss_of(engine, batch(vocab_of(model), 0, rank)).backward()
    return {"grads": engine.full_grad_dict(), "log": list(engine.collective_log)}


def train_plan(name: str, rank: int, plan: str) -> dict:
    """A named buffer plan: 3 steps with clipping, then 4 accumulated micro-batches."""
    model = build(name)
    engine = YaFSDP(model, units_of(model), param_dtype=torch.float32, buffer_plan=plan)
    opt = optimizer(engine)
    vocab = vocab_of(model)
    out: dict = {"losses": [], "norms": [], "logs": [], "plan": engine.buffer_plan}
    out["padded"] = [u.padded_numel for u in engine.layout.units]
    for step in range(STEPS):
        engine.schedule_log.clear()
        loss = loss_of(engine, batch(vocab, step, rank))
        loss.backward()
        if step == 0:
            out["grads1"] = engine.full_grad_dict()
        out["norms"].append(engine.clip_grad_norm_(MAX_NORM).item())
        opt.step()
        opt.zero_grad()
        out["losses"].append(loss.item())
        out["logs"].append(list(engine.schedule_log))
    out["final"] = engine.full_state_dict()
    out["lanes"] = lanes_inside_weight_buffers(engine)
    model = build(name)
    engine = YaFSDP(
        model, units_of(model), param_dtype=torch.float32, grad_accum_steps=BATCH,
        buffer_plan=plan,
    )  # fmt: skip
    tokens = batch(vocab, 0, rank)
    for m in range(BATCH):
        loss_of(engine, tokens[m : m + 1]).backward()
    out["accum_grads"] = engine.full_grad_dict()
    return out


def unit_weight_bytes(n_layers: int) -> int:
    """Bytes of unsharded unit weights (the resident norm unit grows with depth; not counted)."""
    model = build("gpt", n_layers=n_layers)
    engine = YaFSDP(model, units_of(model), param_dtype=torch.bfloat16, buffer_plan=PLAN)
    resident = engine.buffers.resident_weight
    return engine.memory_report()["weights"] - resident.numel() * resident.element_size()


def engine_suite(rank: int, world_size: int) -> dict:
    torch.manual_seed(0)
    out: dict = {"two_buffers": {n: unit_weight_bytes(n) for n in (4, 32)}}
    for name in MODELS:
        r, engine, opt = train_fp32(name, rank)
        r["roundtrip"] = roundtrip(engine, opt, name, rank)
        r["bf16"] = train_bf16(name, rank, torch.float32)
        r["bf16_reduce"] = train_bf16(name, rank, torch.bfloat16)
        r["bf16_prefetch"] = train_bf16(name, rank, torch.float32, prefetch=True)
        r["prefetch_wait"] = prefetch_then_wait(name, rank)
        r["accum"] = train_accum(name, rank, BATCH)
        r["step_ends"] = step_ends(name, rank)
        r["ckpt"] = train_ckpt(name, rank, 2)
        r["ends_shared"] = train_plan(name, rank, "ends_shared")
        r["separate_ends"] = train_plan(name, rank, "separate_ends")
        r["lean_alternating"] = train_plan(name, rank, "lean_alternating")
        r["half_staging"] = train_plan(name, rank, "half_staging")
        r["split_vocab"] = train_plan(name, rank, "split_vocab")
        r["n_units"] = len(engine.layout.units)
        r["unit_names"] = [unit.name for unit in engine.layout.units]
        out[name] = r
    return out
