"""The report from hand-made sweeps: exact table shape, speedup arithmetic, README order,
failure cells, missing baselines, corrupt files, noise marks, loss parity, figures."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest
from sweep_fixtures import write_job

from harness.jobdir.grid_point import GridPoint
from harness.jobdir.prediction import Prediction, write_prediction
from harness.plan.explain import why_lines
from harness.report import build_report
from harness.report.__main__ import main
from harness.report.matching import model_display
from harness.report.speedups import Speedup
from harness.results.timelines import write_timeline_index

HEADER = (
    "| model | gpu-count | seq-len | num-ckpt-layers | speedup | YaFSDP iteration time (s) "
    "| FSDP iteration time (s) |"
)
# tabulate's GitHub separator: one run of dashes per column, as wide as the column
SEPARATOR = re.compile(r"(\|-{3,}){7}\|")


def render(sweep: Path, tmp_path: Path) -> str:
    return build_report([sweep], tmp_path / "out").read_text()


def table_after(text: str, heading_start: str) -> list[str]:
    """The lines of the first published table below the heading that starts so."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(heading_start))
    top = next(i for i in range(start, len(lines)) if lines[i] == HEADER)
    end = top
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[top:end]


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("|").split(" | ")]


def test_published_table_exact_shape_and_speedup_arithmetic(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    kw = dict(model="llama2_7b", gpus=64, seq_len=2048)
    write_job(sweep, "0", engine="yafsdp", step_times=[1.9, 2.0, 2.0, 2.1, 2.0], **kw)
    write_job(sweep, "1", engine="fsdp1", step_times=[2.5] * 5, **kw)
    table = table_after(render(sweep, tmp_path), "### YaFSDP vs FSDP1")
    assert SEPARATOR.fullmatch(table.pop(1))
    assert table == [
        HEADER,
        # (2.5 - 2.0) / 2.5 = 20%; spread = yafsdp's p90-p10 (2.06 - 1.94) / 2.5 = 4.80%.
        "| Llama 2 7B | 64 | 2048 | 0 | 20.00%, 1 repeat (run-to-run noise not measured) "
        "| 2.000 | 2.500 |",
    ]


def test_rows_follow_the_readme_order(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    points = [
        ("llama3_70b", 256, 2048, 20),
        ("llama_tiny", 2, 128, 1),
        ("llama2_7b", 128, 2048, 0),
        ("llama2_70b", 256, 4096, 50),
        ("llama2_7b", 64, 4096, 0),
        ("llama2_7b", 64, 2048, 0),
        ("llama_tiny", 2, 128, 0),
        ("llama2_70b", 256, 2048, 10),
        ("llama3_8b", 64, 2048, 0),
        ("llama2_13b", 128, 2048, 0),
        ("llama2_34b", 256, 4096, 5),
    ]
    job = 0
    for model, gpus, seq, ckpt in points:
        for engine in ("fsdp1", "yafsdp"):
            write_job(
                sweep, str(job), model=model, gpus=gpus, seq_len=seq, ckpt_layers=ckpt,
                engine=engine,
            )  # fmt: skip
            job += 1
    rows = [cells(r)[:4] for r in table_after(render(sweep, tmp_path), "### YaFSDP vs FSDP1")[2:]]
    assert rows == [
        ["Llama 2 7B", "64", "2048", "0"],
        ["Llama 2 7B", "64", "4096", "0"],
        ["Llama 2 7B", "128", "2048", "0"],
        ["Llama 2 13B", "128", "2048", "0"],
        ["Llama 2 34B", "256", "4096", "5"],
        ["Llama 2 70B", "256", "2048", "10"],
        ["Llama 2 70B", "256", "4096", "50"],
        ["Llama 3 8B", "64", "2048", "0"],
        ["Llama 3 70B", "256", "2048", "20"],
        ["llama_tiny", "2", "128", "0"],
        ["llama_tiny", "2", "128", "1"],
    ]


def test_model_names_as_in_the_readme() -> None:
    assert model_display("llama2_34b") == "Llama 2 34B"
    assert model_display("llama3_70b") == "Llama 3 70B"
    assert model_display("llama_tiny") == "llama_tiny"


def test_failed_jobs_show_their_status_in_the_cell_and_their_reason(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_job(sweep, "0", engine="yafsdp", seq_len=128)
    write_job(sweep, "1", engine="fsdp1", seq_len=128, status="oom", error="CUDA out of memory")
    write_job(
        sweep, "2", engine="yafsdp", seq_len=256, status="failed",
        error="Traceback (most recent call last):\n  File x\nRuntimeError: rank 1 exploded",
    )  # fmt: skip
    write_job(sweep, "3", engine="fsdp1", seq_len=256)
    write_job(sweep, "4", engine="yafsdp", seq_len=512)
    write_job(sweep, "5", engine="fsdp1", seq_len=512, status="timeout", error="")
    text = render(sweep, tmp_path)
    rows = [cells(r) for r in table_after(text, "### YaFSDP vs FSDP1")[2:]]
    assert [r[4:] for r in rows] == [
        ["—", "1.000", "OOM"],
        ["—", "failed", "1.000"],
        ["—", "1.000", "timeout"],
    ]
    failed = text.split("## Failed jobs")[1].split("\n## ")[0]
    assert "| `1` | llama_tiny | 2 | 128 | 0 | fsdp1 | OOM | CUDA out of memory |" in failed
    assert (
        "| `2` | llama_tiny | 2 | 256 | 0 | yafsdp | failed | RuntimeError: rank 1 exploded |"
        in (failed)
    )
    assert "| timeout | (no error text recorded) |" in failed


def test_single_engine_has_no_speedup_table_but_the_rest(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_job(sweep, "0", engine="yafsdp")
    write_job(sweep, "1", engine="yafsdp", seq_len=256)
    text = render(sweep, tmp_path)
    assert HEADER not in text
    assert "No engine to compare yafsdp with (yafsdp_compile, fsdp1, fsdp2, fsdp2_tuned, " in text
    assert "Engines found: yafsdp." in text
    assert "| llama_tiny | 2 | 256 | 0 | yafsdp | 1.000 |" in text  # the timing table
    assert "No grid point has two finished jobs with loss curves to compare." in text


def test_baseline_without_yafsdp_says_so(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_job(sweep, "0", engine="fsdp2")
    text = render(sweep, tmp_path)
    assert "**YaFSDP did not run in these sweeps**" in text
    rows = table_after(text, "### YaFSDP vs FSDP2")[2:]
    assert rows == ["| llama_tiny | 2 | 128 | 0 | — | — | 1.000 |"]
    assert "YaFSDP is missing at 1 of 1 points" in text


def test_missing_baseline_points_show_a_dash_and_a_note(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_job(sweep, "0", engine="yafsdp", step_times=[0.8] * 5)
    write_job(sweep, "1", engine="fsdp1")
    write_job(sweep, "2", engine="fsdp2")
    write_job(sweep, "3", engine="yafsdp", seq_len=256, step_times=[0.8] * 5)
    write_job(sweep, "4", engine="fsdp2", seq_len=256)
    text = render(sweep, tmp_path)
    fsdp1 = table_after(text, "### YaFSDP vs FSDP1")[2:]
    assert fsdp1 == [
        "| llama_tiny | 2 | 128 | 0 | 20.00%, 1 repeat (run-to-run noise not measured) "
        "| 0.8000 | 1.000 |",
        "| llama_tiny | 2 | 256 | 0 | — | 0.8000 | — |",
    ]
    assert "fsdp1 is missing at 1 of 2 points" in text
    assert len(table_after(text, "### YaFSDP vs FSDP2")) == 4
    assert "fsdp2 is missing" not in text
    # Tables appear in baseline order, tuned FSDP2 only where it ran.
    assert text.index("### YaFSDP vs FSDP1") < text.index("### YaFSDP vs FSDP2")
    assert "tuned FSDP2" not in text


def test_corrupt_result_file_is_reported_and_skipped(sweep: Path, tmp_path: Path) -> None:
    (sweep / "9").mkdir()
    (sweep / "9" / "result.json").write_text('{"status": "ok", ')
    text = render(sweep, tmp_path)
    (sweep / "10" / ".hydra").mkdir(parents=True)  # Hydra made it; the job never finished
    text = render(sweep, tmp_path)
    assert "2 job(s) without a usable result file" in text.split("## ")[0]  # in the summary
    problems = text.split("## Problems")[1]
    assert "- corrupt result file 9/result.json: unreadable result" in problems
    assert "- no result file in job directory 10 (never finished?)" in problems
    assert "6 jobs (5 ok, 1 OOM)" in text


def test_speedup_inside_the_spread_is_flagged_and_one_repeat_gives_no_verdict(
    tmp_path: Path,
) -> None:
    sweep = tmp_path / "s"
    write_job(sweep, "0", engine="yafsdp", step_times=[0.9, 1.0, 1.0, 1.0, 1.1])
    write_job(sweep, "1", engine="fsdp1", step_times=[1.0, 1.02, 1.02, 1.02, 1.04])
    text = render(sweep, tmp_path)
    row = cells(table_after(text, "### YaFSDP vs FSDP1")[2])
    # 0.02 / 1.02 = 1.96% against yafsdp's p10-p90 range 0.12 / 1.02 = 11.76%.
    assert row[4] == (
        "1.96%, 1 repeat (run-to-run noise not measured) ⚠ within the step spread (11.76%)"
    )
    assert "**Run-to-run noise was not measured** at every point (1 repeat)" in text
    assert "significant only when the interval excludes 0" in text
    assert "paired Student t interval over repeats" in text


@pytest.mark.parametrize(
    ("speedup", "spread", "beyond"),
    [(5.0, 4.9, True), (-5.0, 4.9, True), (5.0, 5.0, False), (-1.0, 3.0, False)],
)
def test_step_spread_rule_boundary(speedup: float, spread: float, beyond: bool) -> None:
    point = GridPoint.of({"model": "llama_tiny", "gpus": 2, "seq_len": 32, "ckpt_layers": 0})
    row = Speedup(point, None, None, speedup, spread, False)
    assert row.beyond_spread is beyond
    assert row.significant is None, "without repeats there is no verdict"


LOSSES = [7.6, 7.5, 7.3, 7.2, 7.0]


def parity_sweep(tmp_path: Path, other: list[float], dtype: str = "bf16") -> str:
    sweep = tmp_path / "s"
    write_job(sweep, "0", engine="yafsdp", losses=LOSSES, dtype=dtype, step_times=[0.5] * 5)
    write_job(sweep, "1", engine="fsdp1", losses=other, dtype=dtype)
    return render(sweep, tmp_path)


def test_loss_mismatch_is_loud_and_voids_the_comparison(tmp_path: Path) -> None:
    text = parity_sweep(tmp_path, [7.6, 7.5, 7.3, 7.92, 7.0])  # +10% at step 3
    assert "**LOSS MISMATCH: the comparison at these points is void.**" in text
    assert "Loss mismatch at 1 grid point(s)" in text.split("## ")[0]
    assert "largest |Δloss| 0.72 at step 3 (9.09e-02 relative > tolerance 2e-02)" in text
    assert "50.00%, 1 repeat (run-to-run noise not measured) **void: loss mismatch**" in text
    assert "| fsdp1 | yafsdp | 5 | 0.72 | 3 | 9.09e-02 | 2e-02 | **MISMATCH** |" in text


def test_losses_within_tolerance_pass(tmp_path: Path) -> None:
    text = parity_sweep(tmp_path, [7.6, 7.5, 7.3, 7.25, 7.0])  # 0.7% at step 3
    assert "MISMATCH" not in text
    assert "void" not in text
    assert "| fsdp1 | yafsdp | 5 | 0.05 | 3 | 6.90e-03 | 2e-02 | ok |" in text


def test_loss_tolerance_depends_on_dtype(tmp_path: Path) -> None:
    text = parity_sweep(tmp_path, [7.6, 7.5, 7.3, 7.25, 7.0], dtype="fp32")
    assert "| 6.90e-03 | 1e-03 | **MISMATCH** |" in text


def test_non_finite_loss_is_a_mismatch(tmp_path: Path) -> None:
    text = parity_sweep(tmp_path, [7.6, 7.5, math.nan, math.nan, math.nan])
    assert "**MISMATCH** (non-finite loss at step 2 (fsdp1 nan, yafsdp 7.3))" in text


def test_figures_and_timelines_are_embedded_with_relative_links(
    sweep: Path, tmp_path: Path
) -> None:
    (sweep / "timelines").mkdir()
    png = (sweep / "0/traces/timeline.png").read_bytes()
    (sweep / "timelines" / "overview.png").write_bytes(png)
    # as a sweep draws it: the picture, and the index that says which grid point it shows
    (sweep / "timelines" / "llama_tiny_g2_s128_c1.png").write_bytes(png)
    point = GridPoint.of(dict(model="llama_tiny", gpus=2, seq_len=128, ckpt_layers=1))
    write_timeline_index(sweep, {point: "llama_tiny_g2_s128_c1.png"})
    out = tmp_path / "out"
    text = build_report([sweep], out).read_text()
    links = [ln.split("](")[1].rstrip(")") for ln in text.splitlines() if ln.startswith("![")]
    assert links == [
        "figures/speedup_fsdp1.png",
        "figures/speedup_fsdp2.png",
        "figures/peak_memory.png",
        "timelines/000_timeline.png",
        "timelines/001_llama_tiny_g2_s128_c1.png",
        "timelines/002_overview.png",
    ]
    for link in links:
        assert (out / link).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "**llama_tiny, 2 GPUs, seq 128, ckpt 0, yafsdp: `timeline.png`**" in text
    assert (
        "**llama_tiny, 2 GPUs, seq-len 128, 1 checkpointed layer: every engine, one profiled "
        "step on the same time scale**"
    ) in text
    assert "**sweep timeline `overview.png`**" in text


def test_memory_throughput_overlap_and_environment_sections(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_job(sweep, "0", engine="yafsdp", peak_allocated=200 * 2**20, overlap_pct=80.0)
    write_job(sweep, "1", engine="fsdp2", peak_allocated=250 * 2**20, overlap_pct=0.0,
              git_revision="def5678")  # fmt: skip
    text = render(sweep, tmp_path)
    # (no prediction recorded: the predicted columns are empty)
    memory_rows = {
        "fsdp2": "250.0 MiB | — | — | 900.0 MiB | profiler allocations | — | — | +50.0 MiB "
        "(+25.0%)",
        "yafsdp": "200.0 MiB | — | — | 900.0 MiB | profiler allocations | — | — | (reference)",
    }
    for engine, cells in memory_rows.items():
        assert f"| {engine} | {cells} |" in text
    # CPU MFU against the sweep's median peak (0.2 TFLOP/s here), not each job's own figure
    own = "this job's own measurement; MFU uses the sweep's median: measured CPU matmul"
    assert f"| yafsdp | 128.0 | 0.000128 | 0.06% | 0.2 ({own}) |" in text
    assert "CPU peak on node1 (1 threads per rank): median 0.2 TFLOP/s of 2 jobs'" in text
    assert "The data are random tokens" in text.split("## Loss parity")[1]
    overlap = text.split("## Communication overlap")[1].split("\n## ")[0]
    header = "| engine | overlap % | exposed comm / step (s) | comm / step (s) | idle / step (s) |"
    assert header + " traces |" in overlap
    assert "| fsdp2 | 0.0 | 0.01 | 0.02 | 0.005 | `1/traces/` |" in overlap
    assert "| yafsdp | 80.0 | 0.01 | 0.02 | 0.005 | `0/traces/` |" in overlap
    env = text.split("## Environment")[1]
    assert "| 2.13.0+cpu | — | — | gloo | cpu | abc1234 | 2 | node1 | 1 |" in env
    assert "| 2.13.0+cpu | — | — | gloo | cpu | def5678 | 2 | node1 | 1 |" in env
    assert "ran in different environments" in env
    assert "**CPU run.**" in text


def test_one_table_per_setting_when_settings_differ(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    for job, (engine, dtype, t) in enumerate(
        [
            ("yafsdp", "bf16", 0.9),
            ("fsdp1", "bf16", 1.0),
            ("yafsdp", "fp32", 1.5),
            ("fsdp1", "fp32", 2.0),
        ]
    ):
        write_job(sweep, str(job), engine=engine, dtype=dtype, step_times=[t] * 5)
    text = render(sweep, tmp_path)
    section = text.split("### YaFSDP vs FSDP1")[1]
    assert section.count(HEADER) == 2
    bf16, fp32 = section.split("Setting: ")[1:3]
    assert bf16.startswith("micro_batch=1, grad_accum=1, dtype=bf16, seed=0, model_impl=native.")
    assert "| 10.00%, 1 repeat (run-to-run noise not measured) | 0.9000 | 1.000 |" in bf16
    assert "| 25.00%, 1 repeat (run-to-run noise not measured) | 1.500 | 2.000 |" in fp32
    figs = sorted(p.name for p in (tmp_path / "out" / "figures").glob("speedup_*.png"))
    assert figs == [
        "speedup_fsdp1_micro_batch_1_grad_accum_1_dtype_bf16_seed_0_model_impl_native.png",
        "speedup_fsdp1_micro_batch_1_grad_accum_1_dtype_fp32_seed_0_model_impl_native.png",
    ]


def test_combined_sweeps_prefer_ok_runs_and_label_jobs(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    write_job(first, "0", engine="yafsdp", status="timeout", error="job wall-clock limit")
    write_job(first, "1", engine="fsdp1")
    write_job(second, "0", engine="yafsdp", step_times=[0.5] * 5)
    out = tmp_path / "out"
    text = build_report([first, second], out).read_text()
    assert (
        "| llama_tiny | 2 | 128 | 0 | 50.00%, 1 repeat (run-to-run noise not measured) "
        "| 0.5000 | 1.000 |"
    ) in text
    assert "| `a/0` | llama_tiny | 2 | 128 | 0 | yafsdp | timeout | job wall-clock limit |" in text
    assert "engine yafsdp: 2 runs; using b/0 (ignored: a/0)" in text
    combined = pd.read_csv(out / "results.csv")
    assert sorted(combined["sweep"].unique()) == [str(first), str(second)]


def test_command_line_default_out_dir(sweep: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([str(sweep)]) == 0
    report = sweep / "report" / "report.md"
    assert capsys.readouterr().out.strip() == f"report written to {report}"
    assert HEADER in report.read_text()
    # Re-rendering into the same place does not pick up the report's own files as jobs.
    assert main([str(sweep)]) == 0
    assert "6 jobs (5 ok, 1 OOM)" in report.read_text()


def test_command_line_refuses_a_missing_sweep(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "nope")])
    assert exc.value.code == 2


def test_empty_sweep_and_all_failed_sweep_still_render(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    text = build_report([empty], tmp_path / "out1").read_text()
    assert "0 jobs (none)" in text
    assert "No engine to compare yafsdp with" in text and "Engines found: none." in text
    failed = tmp_path / "failed"
    write_job(failed, "0", engine="yafsdp", status="oom", error="over memory_limit_gb=1")
    write_job(failed, "1", engine="fsdp1", status="invalid", error="ckpt_layers=9 > 4 layers")
    text = build_report([failed], tmp_path / "out2").read_text()
    assert table_after(text, "### YaFSDP vs FSDP1")[2:] == [
        "| llama_tiny | 2 | 128 | 0 | — | OOM | invalid |"
    ]
    assert "| invalid | ckpt_layers=9 > 4 layers |" in text


def test_the_planners_reasons_sit_beside_the_measured_speedups(tmp_path: Path) -> None:
    """Each job keeps its prediction with its terms, and the yafsdp job the planner's lines
    against each baseline (`python -m harness.plan` prints the same); the report prints the
    stored lines beside the measured speedup."""
    sweep = tmp_path / "sweep"
    terms = {
        "yafsdp": {"iteration_time_s": 0.9, "breakdown": {"compute": 0.8, "yafsdp_buffers": 0.1},
                   "mechanisms": {"yafsdp_buffers": 0.1}, "waits": {}},
        "fsdp1": {"iteration_time_s": 1.0, "breakdown": {"compute": 0.8, "fsdp1_flat_grad": 0.05,
                  "exposed all_gather": 0.15}, "mechanisms": {"rate_limiter": 0.12},
                  "waits": {"exposed all_gather": 12}},
    }  # fmt: skip
    write_job(sweep, "0", engine="yafsdp", step_times=[0.9] * 5, predicted=terms["yafsdp"])
    write_job(sweep, "1", engine="fsdp1", step_times=[1.0] * 5, predicted=terms["fsdp1"])
    # the yafsdp job stores the planner's lines with its prediction when it starts
    lines = why_lines(terms["yafsdp"], terms["fsdp1"], "fsdp1")
    write_prediction(sweep / "0", Prediction(terms=terms["yafsdp"], why={"fsdp1": lines}))
    text = build_report([sweep], tmp_path / "out").read_text()
    assert "measured speedup +10.0%, predicted +10.0%" in text
    assert "fsdp1 +0.100 s (+10.0% of its step) against yafsdp" in text
    assert "+0.150 s: compute waiting for all-gathers, fsdp1 0.150 s (12 units wait)" in text
    assert "mechanism rate limiter (limit_all_gathers): fsdp1 +0.120 s" in text


def test_fewer_than_three_timed_steps_cannot_judge_a_difference(tmp_path: Path) -> None:
    """With 1 or 2 timed steps the p10-p90 range says nothing of the noise (one step: 0)."""
    sweep = tmp_path / "s"
    write_job(sweep, "0", engine="yafsdp", step_times=[0.8, 0.8])
    write_job(sweep, "1", engine="fsdp1", step_times=[1.0, 1.0])
    text = render(sweep, tmp_path)
    row = cells(table_after(text, "### YaFSDP vs FSDP1")[2])
    assert "2 timed steps: too few for the step spread to judge" in row[4]
    assert "fewer than 3 timed steps" in text


def test_the_noise_rule_needs_three_steps_of_each_engine() -> None:
    point = GridPoint.of({"model": "llama_tiny", "gpus": 2, "seq_len": 32, "ckpt_layers": 0})
    assert Speedup(point, None, None, 20.0, 0.0, False, timed_steps=2).beyond_spread is None
    assert Speedup(point, None, None, 20.0, 0.0, False, timed_steps=3).beyond_spread is True
