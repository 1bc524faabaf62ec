"""Render `report.md` (and its figures) from one or more sweep directories."""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from harness.report import figures
from harness.report.compare import (
    BASELINE_TITLES,
    BASELINES,
    MISSING,
    STATUS_CELL,
    YAFSDP,
    LossParity,
    Speedup,
    as_int,
    loss_parity,
    match_key,
    model_display,
    point_label,
    select_runs,
    sort_jobs,
    speedups,
    value,
    with_variants,
)
from harness.report.engine_setup import engine_setup_table
from harness.results import PROFILE_PREFIX, GridPoint, Setting, collect_results
from harness.trace.timeline import parse_sweep_timeline_name

REPORT_FILE = "report.md"
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
NOISE_LEGEND = (
    "Speedup = (T_fsdp - T_yafsdp) / T_fsdp, T = median iteration time. "
    "*spread*: the larger of the two engines' p10-p90 step-time ranges, in % of T_fsdp. "
    "**n.s.** (not significant): |T_fsdp - T_yafsdp| is no larger than that spread, so "
    "ordinary step-to-step variation could produce the difference. A failed job shows its "
    "status (`OOM`, `failed`, `timeout`, `invalid`, `interrupted`); `—` means no such job "
    "in the sweep."
)
PROFILE_HEADERS = {
    PROFILE_PREFIX + "overlap_pct": "overlap %",
    PROFILE_PREFIX + "exposed_comm_s_per_step": "exposed comm / step (s)",
    PROFILE_PREFIX + "comm_s_per_step": "comm / step (s)",
    PROFILE_PREFIX + "compute_s_per_step": "compute / step (s)",
    PROFILE_PREFIX + "idle_s_per_step": "idle / step (s)",
    PROFILE_PREFIX + "memcpy_s_per_step": "memory copies / step (s)",
    PROFILE_PREFIX + "window_s_per_step": "profiled step (s)",
}
ENV_GROUP = ["torch", "cuda", "nccl", "backend", "device_name", "git_revision"]


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(c: object) -> str:
        return str(c).replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(cell(h) for h in header) + " |",
        "|" + "|".join(" --- " for _ in header) + "|",
    ]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt_time(t: float | None) -> str:
    if t is None:
        return MISSING
    return f"{t:#.4g}"  # 4 significant digits, trailing zeros kept: 0.9000, 1.000, 12.34


def fmt_bytes(b: float | None) -> str:
    if b is None:
        return MISSING
    return f"{b / 2**30:.2f} GiB" if abs(b) >= 2**30 else f"{b / 2**20:.1f} MiB"


def fmt_num(x: float | None, spec: str = ".3g") -> str:
    return MISSING if x is None else format(float(x), spec)


def time_cell(row: pd.Series | None) -> str:
    """An iteration time, or the job's status when it did not finish; never blank."""
    if row is None:
        return MISSING
    if row["status"] != "ok":
        return STATUS_CELL.get(row["status"], str(row["status"]))
    t = value(row, "iteration_time_s")
    return fmt_time(float(t)) if t is not None else "no timing"


def speedup_cell(s: Speedup) -> str:
    if s.speedup_pct is None:
        return MISSING
    text = f"{s.speedup_pct:.2f}%"
    if s.spread_pct is None:
        text += " (spread unknown)"
    elif s.significant:
        text += f" (spread {s.spread_pct:.2f}%)"
    else:
        text += f" (spread {s.spread_pct:.2f}%, n.s.)"
    if s.loss_mismatch:
        text += " **void: loss mismatch**"
    return text


def point_cells(key: GridPoint) -> list[object]:
    return [model_display(key.model), key.gpus, key.seq_len, key.ckpt_layers]


def short_error(error: object) -> str:
    """The line that says what went wrong: a traceback's last line, cut to a table cell."""
    lines = [ln.strip() for ln in str(error or "").splitlines() if ln.strip()]
    if not lines:
        return "(no error text recorded)"
    text = lines[-1]
    return text if len(text) <= 300 else text[:297] + "..."


def load_sweeps(sweep_dirs: Sequence[Path]) -> tuple[pd.DataFrame, list[str]]:
    """All jobs of all sweeps, each row tagged with its sweep and a printable job label."""
    frames, problems = [], []
    several = len(sweep_dirs) > 1
    for sweep in sweep_dirs:
        found: list[str] = []
        df = collect_results(sweep, problems=found)
        problems += [f"{sweep}: {p}" if several else p for p in found]
        df["sweep"] = str(sweep)
        df["job_label"] = [f"{Path(sweep).name}/{j}" if several else j for j in df["job_dir"]]
        frames.append(df)
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=["job_dir", "status", "engine", "job_label", "sweep"]), problems
    return with_variants(pd.concat(frames, ignore_index=True)), problems


def _settings(df: pd.DataFrame) -> list[Setting]:
    seen: list[Setting] = []
    for _, row in sort_jobs(df).iterrows():
        s = match_key(row).setting
        if s not in seen:
            seen.append(s)
    return seen


def _in_setting(df: pd.DataFrame, setting: Setting) -> pd.DataFrame:
    mask = [match_key(r).setting == setting for _, r in df.iterrows()]
    return df[mask]


class _Report:
    def __init__(self, df: pd.DataFrame, problems: list[str], out_dir: Path, sweeps: list[Path]):
        self.df, self.notes = select_runs(df)
        self.all_jobs = df
        self.problems = problems
        self.out_dir = out_dir
        self.sweeps = sweeps
        self.parity = loss_parity(self.df) if not self.df.empty else []
        self.lines: list[str] = []

    def add(self, *blocks: str) -> None:
        for b in blocks:
            self.lines += [b, ""]

    # --- sections -------------------------------------------------------------------------

    def header(self) -> None:
        self.add("# yafsdp-bench report")
        sweeps = ", ".join(f"`{s}`" for s in self.sweeps)
        counts = self.all_jobs["status"].value_counts() if not self.all_jobs.empty else {}
        status_text = ", ".join(
            f"{n} {STATUS_CELL.get(s, s)}" for s, n in sorted(dict(counts).items())
        )
        self.add(
            f"Generated by `python -m harness.report` from {sweeps}: "
            f"{len(self.all_jobs)} jobs ({status_text or 'none'})."
        )
        warnings = []
        mismatches = [p for p in self.parity if p.mismatch]
        if mismatches:
            warnings.append(
                f"**Loss mismatch at {len({p.key for p in mismatches})} grid point(s): the "
                "comparisons there are void** (see [Loss parity](#loss-parity))."
            )
        if self.problems:
            warnings.append(
                f"{len(self.problems)} job(s) without a usable result file, left out of "
                "every table (see [Problems](#problems))."
            )
        if warnings:
            self.add("> [!WARNING]\n" + "\n".join(f"> - {w}" for w in warnings))
        if self._on_cpu():
            self.add(
                "> [!NOTE]\n> **CPU run.** These jobs ran on CPU ranks with gloo. Times, "
                "memory and overlap describe this machine, not a GPU cluster. gloo's "
                "reduce-scatter is an all-reduce underneath for every engine, and PyTorch "
                "FSDP2 issues its collectives synchronously on CPU (0% overlap by default; "
                "`fsdp2_tuned` adds asynchronous unshard and explicit prefetch)."
            )

    def _on_cpu(self) -> bool:
        df = self.all_jobs
        return bool(
            ("backend" in df and (df["backend"] == "gloo").any())
            or ("device" in df and (df["device"] == "cpu").any())
        )

    def published_tables(self) -> None:
        self.add("## Speedup tables (the YaFSDP README's format)")
        df = self.df
        present = [b for b in BASELINES if not df.empty and (df["engine"] == b).any()]
        has_yafsdp = not df.empty and (df["engine"] == YAFSDP).any()
        if not present:
            engines = ", ".join(sorted(df["engine"].dropna().unique())) if not df.empty else ""
            self.add(
                "No FSDP baseline (fsdp1, fsdp2, fsdp2_tuned) in these sweeps, so there is no "
                f"speedup to show. Engines found: {engines or 'none'}."
            )
            return
        if not has_yafsdp:
            self.add(
                "**YaFSDP did not run in these sweeps**: every speedup below is `—` (missing)."
            )
        self.add(NOISE_LEGEND)
        settings = _settings(df)
        for baseline in present:
            self.add(f"### YaFSDP vs {BASELINE_TITLES[baseline]}")
            for setting in settings:
                rows = speedups(_in_setting(df, setting), baseline, self.parity)
                if not rows:
                    continue
                self.add(f"Setting: {setting.label()}.")
                self.add(
                    md_table(
                        PUBLISHED_HEADER,
                        [
                            [
                                *point_cells(r.key),
                                speedup_cell(r),
                                time_cell(r.yafsdp),
                                time_cell(r.baseline),
                            ]
                            for r in rows
                        ],
                    )
                )
                missing_y = sum(r.yafsdp is None for r in rows)
                missing_b = sum(r.baseline is None for r in rows)
                gaps = []
                if missing_y:
                    gaps.append(f"YaFSDP is missing at {missing_y} of {len(rows)} points")
                if missing_b:
                    gaps.append(f"{baseline} is missing at {missing_b} of {len(rows)} points")
                if gaps:
                    self.add("Missing baseline or engine (`—`): " + "; ".join(gaps) + ".")
                png = figures.speedup_figure(
                    rows, baseline, self._figure_path(f"speedup_{baseline}", setting, settings)
                )
                if png:
                    self.add(f"![YaFSDP speedup over {baseline}]({self._rel(png)})")

    def engine_setup(self) -> None:
        self.add("## How each engine was set up")
        header, rows = engine_setup_table(self.df)
        if not rows:
            self.add("No job in these sweeps recorded its engine settings.")
            return
        self.add(
            "Each engine's effective settings, as its jobs recorded them (`engine_settings` "
            "in result.json). A setting that differs between one engine's jobs lists its "
            "values, separated by ` / `; `—`: the engine has no such setting."
        )
        self.add(md_table(header, rows))

    def _figure_path(self, stem: str, setting: Setting, settings: list[Setting]) -> Path:
        if len(settings) > 1:
            stem += "_" + re.sub(r"[^A-Za-z0-9]+", "_", setting.label()).strip("_")
        return self.out_dir / "figures" / f"{stem}.png"

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.out_dir).as_posix()

    def _per_engine_table(
        self, columns: list[str], cells: Callable[[pd.Series], list[object] | None]
    ) -> str | None:
        rows = []
        for _, row in sort_jobs(self.df[self.df["status"] == "ok"]).iterrows():
            c = cells(row)
            if c is not None:
                rows.append([*point_cells(match_key(row)), row["engine"], *self._setting(row), *c])
        if not rows:
            return None
        return md_table([*POINT_HEADER, "engine", *self._setting_header(), *columns], rows)

    def _several_settings(self) -> bool:
        return len(_settings(self.all_jobs)) > 1 if not self.all_jobs.empty else False

    def _setting_header(self) -> list[str]:
        """A `setting` column wherever jobs differ by more than grid point and engine."""
        return ["setting"] if self._several_settings() else []

    def _setting(self, row: pd.Series) -> list[str]:
        if not self._several_settings():
            return []
        return [match_key(row).setting.label()]

    def timing(self) -> None:
        self.add("## Iteration time and noise")
        self.add(
            "Median over the timed steps (warm-up excluded; each step's time is the slowest "
            "rank's; the profiled pass is never timed)."
        )

        def cells(row: pd.Series) -> list[object]:
            t = value(row, "iteration_time_s")
            p10, p90 = value(row, "iteration_time_p10_s"), value(row, "iteration_time_p90_s")
            spread = f"{(p90 - p10) / t * 100:.1f}%" if None not in (t, p10, p90) and t else MISSING
            steps = value(row, "step_times_s")
            n = len(json.loads(steps)) if steps else None
            return [fmt_time(t), fmt_time(p10), fmt_time(p90), spread, MISSING if n is None else n]

        table = self._per_engine_table(
            ["median (s)", "p10 (s)", "p90 (s)", "p90-p10 / median", "timed steps"], cells
        )
        self.add(table or "No finished job.")

    def memory(self) -> None:
        self.add("## Peak memory")
        refs = (
            {
                match_key(r): figures.primary_memory(r)
                for _, r in self.df[
                    (self.df["engine"] == YAFSDP) & (self.df["status"] == "ok")
                ].iterrows()
            }
            if not self.df.empty
            else {}
        )

        def cells(row: pd.Series) -> list[object]:
            peak, kind = figures.primary_memory(row)
            ref, ref_kind = refs.get(match_key(row), (None, ""))
            if row["engine"] == YAFSDP:
                diff = "(reference)"
            elif peak is None or ref is None or kind != ref_kind:
                diff = MISSING
            else:
                sign = "+" if peak >= ref else "-"
                diff = f"{sign}{fmt_bytes(abs(peak - ref))} ({(peak - ref) / ref * 100:+.1f}%)"
            return [
                fmt_bytes(value(row, "peak_memory_allocated_bytes")),
                fmt_bytes(value(row, "peak_memory_reserved_bytes")),
                fmt_bytes(value(row, "peak_rss_bytes")),
                value(row, "memory_source") or MISSING,
                diff,
            ]

        table = self._per_engine_table(
            ["peak allocated", "peak reserved", "peak RSS", "source", "vs YaFSDP"], cells
        )
        self.add(
            "Per rank. *allocated*/*reserved*: the CUDA caching allocator's peaks on GPU, or "
            "what the named source measured on CPU; *RSS*: the process's resident-set peak "
            "over the timed steps (what the allocator kept from the OS, fragmentation "
            "included; on CPU the counterpart of *reserved*). "
            "*vs YaFSDP* compares the allocated peak (RSS where no allocated peak exists) "
            "with YaFSDP's at the same grid point."
        )
        self.add(table or "No finished job reported memory.")
        if not self.df.empty:
            png = figures.memory_figure(self.df, self.out_dir / "figures" / "peak_memory.png")
            if png:
                self.add(f"![Peak memory per engine]({self._rel(png)})")

    def throughput(self) -> None:
        self.add("## Throughput and MFU")

        def cells(row: pd.Series) -> list[object]:
            mfu = value(row, "mfu")
            peak = value(row, "peak_flops_per_device")
            source = value(row, "peak_flops_source") or "source not recorded"
            return [
                fmt_num(value(row, "tokens_per_s_per_device"), ",.1f"),
                fmt_num(value(row, "tflops_per_device"), ".4g"),
                MISSING if mfu is None else f"{float(mfu) * 100:.2f}%",
                MISSING if peak is None else f"{float(peak) / 1e12:.4g} ({source})",
            ]

        self.add(
            "MFU = FLOPs per token (6N' + 12·L·d·T, N' = parameters without the token "
            "embedding) × tokens/s per device / the device's peak. The peak's source is "
            "named: a datasheet figure on GPUs, a matmul measured at start-up on CPU."
        )
        table = self._per_engine_table(
            ["tokens/s per device", "TFLOP/s per device", "MFU", "peak TFLOP/s (source)"], cells
        )
        self.add(table or "No finished job.")

    def overlap(self) -> None:
        self.add("## Communication overlap")
        cols = [
            c
            for c in self.df.columns
            if c.startswith(PROFILE_PREFIX) and c != PROFILE_PREFIX + "traces"
        ]
        first = [PROFILE_PREFIX + "overlap_pct", PROFILE_PREFIX + "exposed_comm_s_per_step"]
        cols = [c for c in first if c in cols] + sorted(c for c in cols if c not in first)
        self.add(
            "From the profiled steps' traces: overlap % = time both communication and "
            "computation are busy / communication time; exposed communication = "
            "communication time with no computation, per step."
        )
        if not cols:
            self.add("No job has a trace summary (profiling off, or no trace was analysed).")
            return

        def cells(row: pd.Series) -> list[object] | None:
            vals = [value(row, c) for c in cols]
            if all(v is None for v in vals):
                return None
            pairs = zip(cols, vals, strict=True)
            traces = f"`{row['job_label']}/traces/`" if value(row, "profile_traces") else MISSING
            return [*(MISSING if v is None else _fmt_profile(c, v) for c, v in pairs), traces]

        header = [PROFILE_HEADERS.get(c, f"`{c[len(PROFILE_PREFIX) :]}`") for c in cols]
        self.add(
            self._per_engine_table([*header, "traces"], cells) or "No finished job was profiled."
        )
        self.add(
            "Traces are the `rank<r>.json.gz` files in the job directory named in the last "
            "column; open them in Perfetto or chrome://tracing."
        )

    def loss(self) -> None:
        self.add("## Loss parity")
        self.add(
            "Matched jobs (same grid point, weights, data and seed; different engine) must "
            "train alike. Each engine's loss curve is compared with the reference engine's "
            "(YaFSDP where it ran); the largest relative difference |Δloss| / max(|loss|) "
            "over the steps must stay within the tolerance for the dtype: "
            "bf16 2e-2, fp16 1e-2, fp32 1e-3. Matched runs differ only by rounding (other "
            "reduction order and shard boundaries; bf16 keeps 8 significant bits, 0.4% per "
            "rounding), which stays well inside these bounds over a short run; a lost or "
            "double-counted gradient reduction or a wrong scale does not."
        )
        mismatches = [p for p in self.parity if p.mismatch]
        if mismatches:
            self.add(
                "> [!WARNING]\n> **LOSS MISMATCH: the comparison at these points is void.** "
                "The engines did not train the same model, so their times cannot be compared:\n"
                + "\n".join(
                    f"> - {point_label(p.key)}: {p.engine} vs {p.reference}, " + _parity_text(p)
                    for p in mismatches
                )
            )
        if not self.parity:
            self.add("No grid point has two finished jobs with loss curves to compare.")
            return
        self.add(
            md_table(
                [
                    *POINT_HEADER,
                    "engine",
                    "reference",
                    "steps",
                    "largest Δloss",
                    "at step",
                    "relative",
                    "tolerance",
                    "verdict",
                ],
                [
                    [
                        *point_cells(p.key),
                        p.engine,
                        p.reference,
                        p.steps,
                        fmt_num(None if math.isnan(p.max_abs_diff) else p.max_abs_diff, ".3g"),
                        p.at_step,
                        "nan" if math.isnan(p.rel_diff) else f"{p.rel_diff:.2e}",
                        f"{p.rtol:.0e}",
                        ("**MISMATCH**" if p.mismatch else "ok")
                        + (f" ({p.note})" if p.note else ""),
                    ]
                    for p in self.parity
                ],
            )
        )

    def timelines(self) -> None:
        self.add("## Timelines")
        found = []
        for _, row in sort_jobs(self.df).iterrows():
            job = Path(row["sweep"]) / row["job_dir"]
            pngs = sorted({*job.glob("*.png"), *job.glob("traces/*.png")})
            found += [(row, p) for p in pngs]
        sweep_level = [
            (None, p) for s in self.sweeps for p in sorted((Path(s) / "timelines").glob("*.png"))
        ]
        found += sweep_level
        if not found:
            self.add("No timeline pictures in these sweeps (profiling off or no trace drawn).")
            return
        self.add(
            "Drawn from the profiled steps' traces (one lane per rank and stream: compute, "
            "communication). Copied here from the job directories."
        )
        dest_dir = self.out_dir / "timelines"
        dest_dir.mkdir(parents=True, exist_ok=True)
        for i, (row, src) in enumerate(found):
            dest = dest_dir / f"{i:03d}_{re.sub(r'[^A-Za-z0-9._-]+', '_', src.name)}"
            shutil.copyfile(src, dest)
            if row is None:
                caption = _sweep_timeline_caption(src.name)
            else:
                caption = f"{point_label(match_key(row))}, {row['engine']}: `{src.name}`"
            self.add(f"**{caption}**\n\n![{src.name}]({self._rel(dest)})")

    def failures(self) -> None:
        self.add("## Failed jobs")
        failed = sort_jobs(self.all_jobs[self.all_jobs["status"] != "ok"])
        if failed.empty:
            self.add("None: every job finished.")
            return
        self.add(
            md_table(
                ["job", *POINT_HEADER, "engine", *self._setting_header(), "status", "reason"],
                [
                    [
                        f"`{r['job_label']}`",
                        *point_cells(match_key(r)),
                        r["engine"],
                        *self._setting(r),
                        STATUS_CELL.get(r["status"], r["status"]),
                        short_error(value(r, "error")),
                    ]
                    for _, r in failed.iterrows()
                ],
            )
        )

    def problems_section(self) -> None:
        if not (self.problems or self.notes):
            return
        self.add("## Problems")
        if self.problems:
            self.add("Skipped (not in any table):\n" + "\n".join(f"- {p}" for p in self.problems))
        if self.notes:
            self.add(
                "Repeated runs of the same job (an ok run wins over a failed one, then the "
                "last listed):\n" + "\n".join(f"- {n}" for n in self.notes)
            )

    def environment(self) -> None:
        self.add("## Environment")
        df = self.all_jobs
        cols = [c for c in ENV_GROUP if c in df.columns]
        if df.empty or not cols:
            self.add("No environment recorded.")
            return
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
        self.add(md_table([*cols, "world sizes", "hosts", "jobs"], rows))
        if len(rows) > 1:
            self.add(
                "> [!WARNING]\n> These jobs ran in different environments (software, devices "
                "or revision); compare them with care."
            )

    def render(self) -> str:
        self.header()
        self.published_tables()
        self.engine_setup()
        self.timing()
        self.memory()
        self.throughput()
        self.overlap()
        self.loss()
        self.timelines()
        self.failures()
        self.problems_section()
        self.environment()
        return "\n".join(self.lines).rstrip() + "\n"


def _fmt_profile(column: str, v: object) -> str:
    if isinstance(v, float):
        return f"{v:.1f}" if column.endswith("_pct") else f"{v:.4g}"
    return str(v)


def _parity_text(p: LossParity) -> str:
    if math.isnan(p.rel_diff):
        return p.note or "non-finite loss"
    return (
        f"largest |Δloss| {p.max_abs_diff:.3g} at step {p.at_step} "
        f"({p.rel_diff:.2e} relative > tolerance {p.rtol:.0e})"
    )


def build_report(sweep_dirs: list[Path], out_dir: Path) -> Path:
    """Write `<out_dir>/report.md`, its figures and a combined results.csv; return report.md."""
    sweep_dirs = [Path(s) for s in sweep_dirs]
    if not sweep_dirs:
        raise ValueError("build_report needs at least one sweep directory")
    out_dir = Path(out_dir)
    df, problems = load_sweeps(sweep_dirs)
    for stale in ("figures", "timelines"):  # pictures of an earlier rendering must not linger
        for png in (out_dir / stale).glob("*.png"):
            png.unlink()
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    text = _Report(df, problems, out_dir, sweep_dirs).render()
    df.drop(columns=["job_label"], errors="ignore").to_csv(out_dir / "results.csv", index=False)
    path = out_dir / REPORT_FILE
    path.write_text(text)
    return path


def _sweep_timeline_caption(file_name: str) -> str:
    point = parse_sweep_timeline_name(file_name)
    if point is None:
        return f"sweep timeline `{file_name}`"
    return (
        f"{point['model']}, {point['gpus']} GPUs, seq-len {point['seq_len']}, "
        f"{point['ckpt_layers']} checkpointed layers: every engine, one profiled step on the "
        "same time scale"
    )
