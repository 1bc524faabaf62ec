"""The report's tables: pure functions of the results table (or of what `compare` derived
from it) that return (header, rows), so each can be checked on a hand-made table.

`several_settings` adds a `setting` column wherever the jobs differ by more than grid
point and engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from harness.jobdir.grid_point import GridPoint
from harness.report.charts import primary_memory
from harness.report.markdown import Table, fmt_bytes, fmt_num, fmt_time, short_error
from harness.report.matching import (
    MISSING,
    STATUS_CELL,
    YAFSDP,
    LossParity,
    as_int,
    match_key,
    metric,
    model_display,
    repeat_of,
    sort_jobs,
    value,
)
from harness.report.run_conditions import interference_cell
from harness.report.speedups import Speedup
from harness.results.table import PROFILE_PREFIX

PUBLISHED_HEADER = [
    "model",
    "gpu-count",
    "seq-len",
    "num-ckpt-layers",
    "speedup",
    "YaFSDP iteration time (s)",
    "FSDP iteration time (s)",
]
POINT_HEADER = PUBLISHED_HEADER[:4]
PROFILE_HEADERS = {
    PROFILE_PREFIX + "overlap_pct": "overlap %",
    PROFILE_PREFIX + "exposed_comm_s_per_step": "exposed comm / step (s)",
    PROFILE_PREFIX + "comm_s_per_step": "comm / step (s)",
    PROFILE_PREFIX + "compute_s_per_step": "compute / step (s)",
    PROFILE_PREFIX + "idle_s_per_step": "idle / step (s)",
    PROFILE_PREFIX + "memcpy_s_per_step": "memory copies / step (s)",
    PROFILE_PREFIX + "window_s_per_step": "profiled step (s)",
}
# The first overlap columns; any other summary field follows, sorted by name.
PROFILE_FIRST = [PROFILE_PREFIX + "overlap_pct", PROFILE_PREFIX + "exposed_comm_s_per_step"]
ENV_GROUP = ["torch", "cuda", "nccl", "backend", "device_name", "git_revision"]


def point_cells(key: GridPoint) -> list[object]:
    return [model_display(key.model), key.gpus, key.seq_len, key.ckpt_layers]


def time_cell(row: pd.Series | None) -> str:
    """An iteration time, or the job's status when it did not finish; never blank."""
    if row is None:
        return MISSING
    if row["status"] != "ok":
        return STATUS_CELL.get(row["status"], str(row["status"]))
    t = metric(row, "iteration_time_s")
    return fmt_time(float(t)) if t is not None else "no timing"


def speedup_cell(s: Speedup) -> str:
    """`9.92% [7.1, 12.5], 3 repeats`; `, n.s.` where the interval holds 0; one repeat says
    that run-to-run noise was not measured. Then the flags: inside the step spread, uneven
    interference, a loss mismatch."""
    left_out = unpaired_text(s)
    if s.speedup_pct is None or s.estimate is None:  # a failure shows in the time cells
        return f"{MISSING} (no pair: {left_out})" if s.other_round else MISSING
    e = s.estimate
    if e.low_pct is not None and e.high_pct is not None:
        text = f"{e.speedup_pct:.2f}% [{e.low_pct:.1f}, {e.high_pct:.1f}], {e.n} repeats"
        text += f" ({left_out})" if left_out else ""
        text += ", significant" if e.significant else ", n.s."
    else:
        text = f"{e.speedup_pct:.2f}%, 1 repeat (run-to-run noise not measured"
        text += f"; {left_out})" if left_out else ")"
    if s.spread_pct is None:
        text += f" {FLAG} step spread unknown"
    elif s.too_few_steps:
        text += f" {FLAG} {s.timed_steps} timed steps: too few for the step spread to judge"
    elif not s.beyond_spread:
        text += f" {FLAG} within the step spread ({s.spread_pct:.2f}%)"
    if s.interference:
        text += f" {FLAG} uneven interference"
    if s.loss_mismatch:
        text += " **void: loss mismatch**"
    return text


def unpaired_text(s: Speedup) -> str:
    """The repeats a speedup leaves out, and why: `1 failed, 1 from another round`."""
    parts = [f"{s.failed} failed"] if s.failed else []
    if s.other_round:
        parts.append(f"{s.other_round} from another round")
    return ", ".join(parts)


def point_time_cell(t: float | None, row: pd.Series | None) -> str:
    """The median over a point's runs of each run's median; a status where none finished."""
    return fmt_time(t) if t is not None else time_cell(row)


def speedup_table(rows: list[Speedup], twin: str | None = None) -> Table:
    """The YaFSDP README's table for one baseline and setting (the speedup cell carries
    its interval); an A/A check's `twin` label heads the other time column."""
    cells = [
        [
            *point_cells(r.key),
            speedup_cell(r),
            point_time_cell(r.t_yafsdp, r.yafsdp),
            point_time_cell(r.t_baseline, r.baseline),
        ]
        for r in rows
    ]
    if twin is None:
        return PUBLISHED_HEADER, cells
    return [*PUBLISHED_HEADER[:-1], f"{twin} iteration time (s)"], cells


def per_engine_table(
    df: pd.DataFrame,
    columns: list[str],
    cells: Callable[[pd.Series], list[object] | None],
    *,
    several_settings: bool = False,
) -> Table:
    """One row per finished job, in README order: grid point, engine, then `cells(row)`
    (a job whose cells are None is left out). No rows: ([], [])."""
    rows = []
    repeats = several_repeats(df)
    for _, row in sort_jobs(df[df["status"] == "ok"]).iterrows():
        c = cells(row)
        if c is not None:
            repeat = [repeat_of(row)] if repeats else []
            setting = _setting(row, several_settings)
            rows.append([*point_cells(match_key(row)), row["engine"], *repeat, *setting, *c])
    if not rows:
        return [], []
    return [*POINT_HEADER, "engine", *(["repeat"] if repeats else []),
            *(["setting"] if several_settings else []), *columns], rows  # fmt: skip


def several_repeats(df: pd.DataFrame) -> bool:
    """Whether any job is a repeat (the tables then name each row's)."""
    return not df.empty and any(repeat_of(r) for _, r in df.iterrows())


# A job whose measured peak is this far from the planner's prediction is flagged.
PREDICTION_FLAG = 0.25
FLAG = "⚠"


def predicted(row: pd.Series, key: str) -> float | None:
    """The planner's prediction for this job (its prediction.json; an older job's
    result.json `metrics.predicted`), or None."""
    record = metric(row, "predicted")
    found = record.get(key) if isinstance(record, dict) else None  # null: no prediction
    return None if found is None else float(found)


def predicted_memory_cell(row: pd.Series) -> str:
    """The predicted peak; where the job's prediction planned yafsdp for another memory
    budget than the one its engine was built with (a GPU's free memory at build, which
    the job could not know), the cell says so: the buffer plans may differ."""
    guess = fmt_bytes(predicted(row, "peak_memory_bytes"))
    record = metric(row, "predicted")
    settings = value(row, "engine_settings")
    if not isinstance(record, dict) or not isinstance(settings, dict):
        return guess
    planned, built = record.get("memory_budget_bytes"), settings.get("memory_budget_bytes")
    if planned is None or built is None or planned == built:
        return guess
    return f"{guess} ({FLAG} planned for a {fmt_bytes(planned)} budget, built {fmt_bytes(built)})"


def prediction_error(measured: float | None, guess: float | None, *, flag: bool) -> str:
    """(predicted - measured) / measured, flagged past PREDICTION_FLAG where asked."""
    if measured is None or guess is None or not measured:
        return MISSING
    error = (guess - float(measured)) / float(measured)
    text = f"{error * 100:+.1f}%"
    return f"{FLAG} {text}" if flag and abs(error) > PREDICTION_FLAG else text


def _setting(row: pd.Series, several_settings: bool) -> list[str]:
    return [match_key(row).setting.label()] if several_settings else []


def timing_table(df: pd.DataFrame, *, several_settings: bool = False) -> Table:
    def cells(row: pd.Series) -> list[object]:
        t = metric(row, "iteration_time_s")
        p10, p90 = metric(row, "iteration_time_p10_s"), metric(row, "iteration_time_p90_s")
        spread = f"{(p90 - p10) / t * 100:.1f}%" if None not in (t, p10, p90) and t else MISSING
        steps = metric(row, "step_times_s")
        n = len(steps) if steps else None
        guess = predicted(row, "iteration_time_s")
        return [
            fmt_time(t), fmt_time(p10), fmt_time(p90), spread, MISSING if n is None else n,
            fmt_time(guess), prediction_error(t, guess, flag=False), interference_cell(row),
        ]  # fmt: skip

    columns = ["median (s)", "p10 (s)", "p90 (s)", "p90-p10 / median", "timed steps",
               "predicted (s)", "prediction error", "interference"]  # fmt: skip
    return per_engine_table(df, columns, cells, several_settings=several_settings)


def memory_table(df: pd.DataFrame, *, several_settings: bool = False) -> Table:
    """Peaks per rank, and each engine's against YaFSDP's at the same grid point."""
    yafsdp = df[(df["engine"] == YAFSDP) & (df["status"] == "ok")] if not df.empty else df
    refs = {(match_key(r), repeat_of(r)): primary_memory(r) for _, r in yafsdp.iterrows()}

    def cells(row: pd.Series) -> list[object]:
        peak, kind = primary_memory(row)
        ref, ref_kind = refs.get((match_key(row), repeat_of(row)), (None, ""))
        if row["engine"] == YAFSDP:
            diff = "(reference)"
        elif peak is None or ref is None or kind != ref_kind:
            diff = MISSING
        else:
            sign = "+" if peak >= ref else "-"
            diff = f"{sign}{fmt_bytes(abs(peak - ref))} ({(peak - ref) / ref * 100:+.1f}%)"
        allocated = metric(row, "peak_memory_allocated_bytes")
        guess = predicted(row, "peak_memory_bytes")
        return [
            fmt_bytes(allocated),
            fmt_bytes(metric(row, "peak_memory_reserved_bytes")),
            fmt_bytes(metric(row, "device_memory_outside_allocator_bytes")),
            fmt_bytes(metric(row, "peak_rss_bytes")),
            metric(row, "memory_source") or MISSING,
            predicted_memory_cell(row),
            prediction_error(allocated, guess, flag=True),
            diff,
            buffer_plan_cell(metric(row, "memory_breakdown")),
        ]

    columns = ["peak allocated", "peak reserved", "outside allocator", "peak RSS", "source",
               "predicted", "prediction error", "vs YaFSDP", "buffer plan"]  # fmt: skip
    return per_engine_table(df, columns, cells, several_settings=several_settings)


def buffer_plan_cell(breakdown: object) -> str:
    """yafsdp's plan, the one its peak and speed were measured with, beside its smallest:
    `separate_ends 437 MiB (measured); smallest half_staging 353 MiB`."""
    plan = breakdown.get("buffer_plan") if isinstance(breakdown, dict) else None
    if not isinstance(plan, dict) or not plan.get("name"):
        return MISSING
    text = f"{plan['name']} {fmt_bytes(plan.get('bytes'))} (measured)"
    if plan.get("smallest") and plan["smallest"] != plan["name"]:
        text += f"; smallest {plan['smallest']} {fmt_bytes(plan.get('smallest_bytes'))}"
    return text


def throughput_table(df: pd.DataFrame, *, several_settings: bool = False) -> Table:
    from harness.report.run_conditions import cpu_mfu, cpu_peaks

    peaks = cpu_peaks(df)  # CPU jobs: one peak per machine, not each job's own

    def cells(row: pd.Series) -> list[object]:
        mfu = cpu_mfu(row, peaks)
        mfu = metric(row, "mfu") if mfu is None else mfu
        peak = metric(row, "peak_flops_per_device")
        source = metric(row, "peak_flops_source") or "source not recorded"
        if cpu_mfu(row, peaks) is not None:
            source = f"this job's own measurement; MFU uses the sweep's median: {source}"
        return [
            fmt_num(metric(row, "tokens_per_s_per_device"), ",.1f"),
            fmt_num(metric(row, "tflops_per_device"), ".4g"),
            MISSING if mfu is None else f"{float(mfu) * 100:.2f}%",
            MISSING if peak is None else f"{float(peak) / 1e12:.4g} ({source})",
        ]

    columns = ["tokens/s per device", "TFLOP/s per device", "MFU", "peak TFLOP/s (source)"]
    return per_engine_table(df, columns, cells, several_settings=several_settings)


def profile_columns(df: pd.DataFrame) -> list[str]:
    """The trace-summary columns present, overlap first."""
    cols = [
        c for c in df.columns if c.startswith(PROFILE_PREFIX) and c != PROFILE_PREFIX + "traces"
    ]
    return [c for c in PROFILE_FIRST if c in cols] + sorted(
        c for c in cols if c not in PROFILE_FIRST
    )


def overlap_table(df: pd.DataFrame, *, several_settings: bool = False) -> Table:
    """The trace summary of every profiled job, and where its traces are."""
    cols = profile_columns(df)

    def cells(row: pd.Series) -> list[object] | None:
        vals = [value(row, c) for c in cols]
        if all(v is None for v in vals):
            return None
        pairs = zip(cols, vals, strict=True)
        traces = f"`{row['job_label']}/traces/`" if value(row, "profile_traces") else MISSING
        return [*(MISSING if v is None else _fmt_profile(c, v) for c, v in pairs), traces]

    header = [PROFILE_HEADERS.get(c, f"`{c[len(PROFILE_PREFIX) :]}`") for c in cols]
    return per_engine_table(df, [*header, "traces"], cells, several_settings=several_settings)


def _fmt_profile(column: str, v: object) -> str:
    if isinstance(v, float):
        return f"{v:.1f}" if column.endswith("_pct") else f"{v:.4g}"
    return str(v)


def loss_table(parity: list[LossParity]) -> Table:
    repeats = any(p.repeat for p in parity)
    header = [
        *POINT_HEADER,
        "engine",
        *(["repeat"] if repeats else []),
        "reference",
        "steps",
        "largest Δloss",
        "at step",
        "relative",
        "tolerance",
        "verdict",
    ]
    rows: list[list[object]] = [
        [
            *point_cells(p.key),
            p.engine,
            *([p.repeat] if repeats else []),
            p.reference,
            p.steps,
            fmt_num(None if math.isnan(p.max_abs_diff) else p.max_abs_diff, ".3g"),
            p.at_step,
            "nan" if math.isnan(p.rel_diff) else f"{p.rel_diff:.2e}",
            f"{p.rtol:.0e}",
            ("**MISMATCH**" if p.mismatch else "ok") + (f" ({p.note})" if p.note else ""),
        ]
        for p in parity
    ]
    return header, rows


def failures_table(all_jobs: pd.DataFrame, *, several_settings: bool = False) -> Table:
    """Every job that did not end ok, with the line that says why."""
    failed = sort_jobs(all_jobs[all_jobs["status"] != "ok"])
    setting = ["setting"] if several_settings else []
    rows: list[list[object]] = [
        [
            f"`{r['job_label']}`",
            *point_cells(match_key(r)),
            r["engine"],
            *_setting(r, several_settings),
            STATUS_CELL.get(r["status"], r["status"]),
            short_error(value(r, "error")),
        ]
        for _, r in failed.iterrows()
    ]
    return ["job", *POINT_HEADER, "engine", *setting, "status", "reason"], rows


def environment_table(df: pd.DataFrame) -> Table:
    """One row per distinct software/device environment; ([], []) when none was recorded."""
    cols = [c for c in ENV_GROUP if c in df.columns]
    if df.empty or not cols:
        return [], []
    groups = df[cols].map(lambda v: MISSING if v is None or v == "" or v != v else str(v))
    rows = []
    for keys, group in groups.groupby(cols, sort=False, dropna=False):
        sub = df.loc[group.index]
        world = sorted({as_int(w) for w in sub.get("world_size", pd.Series()).dropna()})
        hosts = sorted(set(sub.get("host", pd.Series()).dropna().astype(str)))
        rows.append(
            [
                *(keys if isinstance(keys, tuple) else (keys,)),
                ", ".join(map(str, world)) or MISSING,
                ", ".join(hosts[:3]) + (f" (+{len(hosts) - 3})" if len(hosts) > 3 else "")
                or MISSING,
                len(sub),
            ]
        )
    return [*cols, "world sizes", "hosts", "jobs"], rows
