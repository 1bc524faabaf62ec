"""yafsdp's buffer plans at a job's point: the plan its engine would hold (`auto`: chosen for
its memory budget) and each named plan's cost, the peak from the memory model and the step
from the time model. Both models drive the engine's own plan code (`yafsdp_impl._plan`), so
a plan's extra collectives (a staging smaller than a unit is reduce-scattered through in
chunks) are priced as the engine would issue them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from harness.config import NAMED_BUFFER_PLANS, JobConfig
from harness.plan.calibrate.calibration import Calibration

if TYPE_CHECKING:
    from harness.plan.planner import PlanRow

# The pressure plans: `half_staging` holds the fewest bytes of the plans that keep the ends
# whole, `split_vocab` (the ends split into vocabulary halves) can hold fewer where an end is
# larger than a layer. yafsdp's smallest plan is the one of them with the lower peak.
PRESSURE_PLANS = ("half_staging", "split_vocab")
NAMED_PLANS = NAMED_BUFFER_PLANS


@dataclass(frozen=True)
class PlanCost:
    plan: str  # the plan the engine holds (a named plan is held as named)
    peak_bytes: int
    iteration_time_s: float | None  # None where the profile has no time figures


def with_plan(cfg: JobConfig, plan: str) -> JobConfig:
    return replace(cfg, engine=replace(cfg.engine, buffer_plan=plan))


def held_plan(cfg: JobConfig, measured: Calibration | None = None) -> str:
    """The plan the engine holds for the job (`YaFSDP(buffer_plan=, memory_budget_bytes=)`)."""
    from harness.plan.memory.yafsdp_layout import yafsdp_layout
    from harness.plan.planner import memory_case

    case = memory_case(cfg, measured=measured)
    _, _, choice = yafsdp_layout(
        case.model, case.world_size, case.dtype, case.reduce_dtype, case.asynchronous,
        case.buffer_plan, case.memory_budget_bytes,
    )  # fmt: skip
    return choice.plan.name


def plan_cost(cfg: JobConfig, plan: str, measured: Calibration | None = None) -> PlanCost:
    """The job with `engine.buffer_plan=plan`: its peak and its step."""
    from harness.plan.planner import predict_time

    job = with_plan(cfg, plan)
    peak = _peak_bytes(job, measured)
    time = predict_time(job, measured, ablate=False)  # the step alone: no mechanism's cost
    held = held_plan(job, measured)
    return PlanCost(held, peak, time.iteration_time_s if time else None)


def _peak_bytes(job: JobConfig, measured: Calibration | None) -> int:
    from harness.plan.memory.model import estimate_memory
    from harness.plan.planner import memory_case

    return estimate_memory(memory_case(job, measured=measured)).peak_bytes


def plan_costs(
    cfg: JobConfig, measured: Calibration | None = None, plans: tuple[str, ...] = NAMED_PLANS
) -> dict[str, PlanCost]:
    """Each named plan's cost at the job's point (yafsdp jobs only)."""
    return {plan: plan_cost(cfg, plan, measured) for plan in plans}


def smallest_plan_cell(cost: dict[str, Any] | None) -> str:
    """`half_staging 65.8 GiB 5.620 s`: yafsdp's smallest plan, its peak and its step."""
    if not cost:
        return "-"
    step = cost["iteration_time_s"]
    return f"{cost['plan']} {cost['peak_bytes'] / 2**30:.1f} GiB" + (
        f" {step:.3f} s" if step is not None else ""
    )


def own_min_ckpt_rows(rows: list[PlanRow], measured: Calibration | None = None) -> list[PlanRow]:
    """Each row re-planned at its engine's own fewest checkpointed layers that fit (rows that
    fit at no count, or whose device memory is unknown, stay as they are). yafsdp left to
    `auto` may also run a pressure plan by name, which fits with fewer layers but adds
    collectives: its row is the faster of `auto` and each pressure plan, each at its own
    fewest layers, as a user choosing would run it."""
    from harness.plan.planner import plan_row

    out = []
    for row in rows:
        candidates = [(row.cfg, row.min_ckpt_layers_to_fit)]
        if row.cfg.engine.name == "yafsdp" and row.cfg.engine.buffer_plan == "auto":
            candidates += _pressure_plans_at_their_fewest_layers(row.cfg, measured)
        planned = [
            row if n == row.cfg.ckpt_layers and cfg is row.cfg
            else plan_row(replace(cfg, ckpt_layers=n), measured)
            for cfg, n in candidates
            if n is not None
        ]  # fmt: skip
        out.append(min(planned, key=_step_s) if planned else row)
    return out


def _step_s(row: PlanRow) -> float:
    """A row's predicted step, for choosing the faster (unknown: never chosen over a known)."""
    time = row.time
    return time.iteration_time_s if time is not None else float("inf")


def _pressure_plans_at_their_fewest_layers(
    cfg: JobConfig, measured: Calibration | None
) -> list[tuple[JobConfig, int | None]]:
    from harness.plan.planner import smallest_fitting_ckpt

    jobs = [with_plan(cfg, plan) for plan in PRESSURE_PLANS]
    return [(job, smallest_fitting_ckpt(job, measured)) for job in jobs]


def smallest_plan(cfg: JobConfig, measured: Calibration | None = None) -> PlanCost:
    """yafsdp's plan with the lowest peak at the job's point, of the pressure plans (the step
    is predicted for that plan alone: the other's is not shown)."""
    peaks = {plan: _peak_bytes(with_plan(cfg, plan), measured) for plan in PRESSURE_PLANS}
    return plan_cost(cfg, min(peaks, key=peaks.__getitem__), measured)


def add_plans(rows: list[PlanRow], measured: Calibration | None = None) -> None:
    """On each yafsdp row, the plan its engine holds there and its smallest plan's cost."""
    for row in rows:
        if row.cfg.engine.name == "yafsdp":
            row.buffer_plan = held_plan(row.cfg, measured)
            row.smallest_plan = asdict(smallest_plan(row.cfg, measured))
