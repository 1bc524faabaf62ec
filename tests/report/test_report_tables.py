"""The report's tables and sections, each on a hand-made results table (no files)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.report.jobs import ReportJobs
from harness.report.markdown import fmt_tolerance, md_table
from harness.report.matching import LOSS_RTOL
from harness.report.picture_links import Pictures
from harness.report.published import published_tables
from harness.report.sections import environment, loss
from harness.report.tables import failures_table, memory_table, timing_table

POINT = dict(model="llama_tiny", gpus=2, seq_len=128, ckpt_layers=0)
SETTING = dict(micro_batch=1, grad_accum=1, dtype="bf16", seed=0)


def job(engine: str, status: str = "ok", **cells: object) -> dict[str, object]:
    return {**POINT, **SETTING, "engine": engine, "status": status, "job_label": engine, **cells}


def test_timing_table_rows_per_finished_job_in_engine_order() -> None:
    df = pd.DataFrame(
        [
            job("fsdp1", iteration_time_s=2.0, iteration_time_p10_s=1.9,
                iteration_time_p90_s=2.1, step_times_s=[2.0] * 3),
            job("yafsdp", iteration_time_s=1.0,
                predicted={"iteration_time_s": 1.25}),
            job("fsdp2", status="oom"),
        ]
    )  # fmt: skip
    header, rows = timing_table(df)
    assert header[4:6] == ["engine", "median (s)"]
    assert header[-3:] == ["predicted (s)", "prediction error", "interference"]
    assert [r[4:] for r in rows] == [
        ["yafsdp", "1.000", "—", "—", "—", "—", "1.250", "+25.0%", "—"],
        ["fsdp1", "2.000", "1.900", "2.100", "10.0%", 3, "—", "—", "—"],
    ]


def test_memory_table_compares_with_yafsdp_at_the_same_point() -> None:
    df = pd.DataFrame(
        [
            job("yafsdp", peak_memory_allocated_bytes=100 * 2**20,
                predicted={"peak_memory_bytes": 110 * 2**20}),
            job("fsdp2", peak_memory_allocated_bytes=150 * 2**20,
                predicted={"peak_memory_bytes": 100 * 2**20}),
        ]
    )  # fmt: skip
    _, rows = memory_table(df)
    assert [(r[4], r[-4], r[-3], r[-2]) for r in rows] == [
        ("yafsdp", "110.0 MiB", "+10.0%", "(reference)"),
        # more than 25% off: flagged
        ("fsdp2", "100.0 MiB", "⚠ -33.3%", "+50.0 MiB (+50.0%)"),
    ]


def test_memory_table_names_the_plan_measured_beside_the_smallest() -> None:
    plan = {"name": "separate_ends", "bytes": 300 * 2**20, "smallest": "half_staging",
            "smallest_bytes": 200 * 2**20}  # fmt: skip
    df = pd.DataFrame([job("yafsdp", memory_breakdown={"weights": 1, "buffer_plan": plan}),
                       job("fsdp2")])  # fmt: skip
    header, rows = memory_table(df)
    assert header[-1] == "buffer plan"
    assert [r[-1] for r in rows] == [
        "separate_ends 300.0 MiB (measured); smallest half_staging 200.0 MiB",
        "—",
    ]


def test_failures_table_shows_the_last_line_of_the_error() -> None:
    df = pd.DataFrame(
        [job("yafsdp"), job("fsdp1", "failed", error="Traceback\n  x\nValueError: y")]
    )
    header, rows = failures_table(df, several_settings=True)
    assert header == ["job", *["model", "gpu-count", "seq-len", "num-ckpt-layers"], "engine",
                      "setting", "status", "reason"]  # fmt: skip
    assert rows == [
        ["`fsdp1`", "llama_tiny", 2, 128, 0, "fsdp1",
         "micro_batch=1, grad_accum=1, dtype=bf16, seed=0, model_impl=native", "failed",
         "ValueError: y"],
    ]  # fmt: skip


def test_no_baseline_section_names_the_baselines_and_engines_found() -> None:
    report = ReportJobs(pd.DataFrame([job("yafsdp", iteration_time_s=1.0)]), [Path("s")])
    blocks = published_tables(report, Pictures())
    assert blocks[1] == (
        "No engine to compare yafsdp with (yafsdp_compile, fsdp1, fsdp2, fsdp2_tuned, "
        "fsdp2_compile, deepspeed, ya_fsdp) in these sweeps, so there is no speedup to show. "
        "Engines found: yafsdp."
    )


def test_loss_prose_states_the_tolerances_in_force() -> None:
    text = "\n".join(loss(ReportJobs(pd.DataFrame([job("yafsdp")]), [Path("s")])))
    for dtype, rtol in LOSS_RTOL.items():
        assert f"{dtype} {fmt_tolerance(rtol)}" in text
    assert fmt_tolerance(2e-2) == "2e-2" and fmt_tolerance(1e-3) == "1e-3"
    assert text.endswith("No grid point has two finished jobs with loss curves to compare.")


def test_environment_warns_when_jobs_ran_in_different_environments() -> None:
    df = pd.DataFrame(
        [
            job("yafsdp", torch="2.13", git_revision="a", world_size=2, host="n1"),
            job("fsdp1", torch="2.13", git_revision="b", world_size=2, host="n1"),
        ]
    )
    blocks = environment(ReportJobs(df, [Path("s")]))
    assert blocks[1] == md_table(
        ["torch", "git_revision", "world sizes", "hosts", "jobs"],
        [["2.13", "a", "2", "n1", 1], ["2.13", "b", "2", "n1", 1]],
    )
    assert "ran in different environments" in blocks[2]
