"""One steady-state backward unit, as the simulator ran it (`harness.plan --cycle`).

For the middle decoder layer's backward: its period on the compute stream (from its backward's
start to the next unit's), the compute stream's busy and idle time in it, and each
collective that starts in it: its kernel time and the communication stream's idle time
before it, split into its causes:
- `chain kernels`: the side kernels between the gradient and the collective (FSDP1's cast
  and pre-divide) running;
- `waiting for compute kernels`: those kernels and the collective waiting for the SMs
  (the give-way rules, `handout.py`);
- `slowest rank`: waiting for the last of W ranks;
- `input not ready`: the rest, the gradient (or gathered shard) still being computed.
Also the step-wide give-way figures the why-lines quote (`give_way_detail`).
"""

from __future__ import annotations

from typing import Any

from harness.models.unit_names import layer_index
from harness.plan.time.simulate import COMM, COMPUTE, Op, Timeline


def _backward_ops(program: list[Op]) -> list[Op]:
    """The decoder layers' backward on the compute stream ('backward.layers.3')."""
    return [op for op in program if op.stream == COMPUTE and layer_index(op.unit) is not None
            and op.name.split(":", 1)[1] == f"backward.{op.unit}"]  # fmt: skip


def cycle(program: list[Op], timeline: Timeline) -> dict[str, Any] | None:
    """The middle layer's backward period and what each stream does in it (None: a
    program with fewer than three layers)."""
    backward = _backward_ops(program)
    if len(backward) < 3:
        return None
    mid = len(backward) // 2
    here, after = backward[mid], backward[mid + 1]
    t0, t1 = timeline.start[here.name], timeline.start[after.name]
    busy = sum(max(0.0, min(timeline.end[o.name], t1) - max(timeline.start[o.name], t0))
               for o in program if o.stream == COMPUTE and o.seconds > 0)  # fmt: skip
    comm = [o for o in program if o.stream == COMM and o.seconds > 0]
    rows = []
    for i, op in enumerate(comm):
        if not t0 <= timeline.start[op.name] < t1:
            continue
        previous_end = timeline.end[comm[i - 1].name] if i else 0.0
        rows.append(_collective(op, timeline, previous_end, program))
    return {
        "unit": here.unit,
        "period_s": t1 - t0,
        "compute_busy_s": busy,
        "compute_idle_s": (t1 - t0) - busy,
        "collectives": rows,
    }


def _collective(op: Op, timeline: Timeline, previous_end: float, program: list[Op]) -> dict:
    by_name = {o.name: o for o in program}
    idle = max(0.0, timeline.start[op.name] - previous_end)
    chain = timeline.chain.get(op.name, ())
    parts = {
        "slowest rank": timeline.slowest_rank.get(op.name, 0.0),
        "waiting for compute kernels": timeline.give_way.get(op.name, 0.0)
        + sum(timeline.give_way.get(c, 0.0) for c in chain),
        "chain kernels": sum(timeline.end[c] - timeline.start[c] for c in chain),
    }
    split, left = {}, idle
    for cause, seconds in parts.items():  # latest cause first: it is the one nearest
        share = min(seconds, left)
        split[cause] = share
        left -= share
    split["input not ready"] = left
    return {
        "collective": op.kind,
        "unit": op.unit,
        "kernel_s": timeline.end[op.name] - timeline.start[op.name],
        "idle_before_s": idle,
        "idle_causes_s": split,
        "chain": [by_name[c].name.split(":", 1)[1] for c in chain],
    }


def give_way_detail(program: list[Op], timeline: Timeline) -> dict[str, Any]:
    """The reduce-scatters' waits for the SMs over the step: how many units waited, the
    mean wait per unit, and the kernels of their chains (for the why-lines)."""
    waits: list[float] = []
    kernels: set[str] = set()
    for op in program:
        if op.stream != COMM or op.kind != "reduce_scatter":
            continue
        chain = timeline.chain.get(op.name, ())
        wait = timeline.give_way.get(op.name, 0.0) + sum(timeline.give_way.get(c, 0.0)
                                                          for c in chain)  # fmt: skip
        if wait > 0:
            waits.append(wait)
            kernels.update(c.split(":", 1)[1].split(".")[0] for c in chain)
    slowest = [timeline.slowest_rank[o.name] for o in program if o.name in timeline.slowest_rank]
    return {
        "units": len(waits),
        "per_unit_s": sum(waits) / len(waits) if waits else 0.0,
        "chain_kernels": sorted(kernels),
        "slowest_rank_collectives": len(slowest),
        "slowest_rank_per_collective_s": sum(slowest) / len(slowest) if slowest else 0.0,
    }


def format_cycle(label: str, data: dict[str, Any] | None) -> str:
    if data is None:
        return f"{label}: no steady-state backward unit (fewer than three layers)"
    ms = 1e3
    busy, idle = data["compute_busy_s"] * ms, data["compute_idle_s"] * ms
    out = [
        f"{label}: backward of {data['unit']}, period {data['period_s'] * ms:.2f} ms; "
        f"compute stream busy {busy:.2f} ms, idle {idle:.2f} ms"
    ]
    for row in data["collectives"]:
        causes = ", ".join(f"{k} {v * ms:.2f}" for k, v in row["idle_causes_s"].items() if v > 0)
        chain = f" after {' -> '.join(row['chain'])}" if row["chain"] else ""
        out.append(
            f"  {row['collective']} of {row['unit']}{chain}: kernel {row['kernel_s'] * ms:.2f} ms;"
            f" comm stream idle before it {row['idle_before_s'] * ms:.2f} ms"
            + (f" ({causes})" if causes else "")
        )
    return "\n".join(out)
