"""The speedup across repeats: its interval, its verdict, and what the report prints."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sweep_fixtures import write_job

from harness.report import build_report
from harness.report.speedups import paired_speedup, t_quantile_975

HEADER = (
    "| model | gpu-count | seq-len | num-ckpt-layers | speedup | YaFSDP iteration time (s) "
    "| FSDP iteration time (s) |"
)


def published_row(text: str, heading: str = "### YaFSDP vs FSDP1") -> list[str]:
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(heading))
    top = next(i for i in range(start, len(lines)) if lines[i] == HEADER)
    return [c.strip() for c in lines[top + 2].strip("|").split(" | ")]


def test_t_quantiles_match_the_tables() -> None:
    assert t_quantile_975(1) == pytest.approx(12.706)
    assert t_quantile_975(2) == pytest.approx(4.303)
    assert t_quantile_975(30) == pytest.approx(2.042)
    assert t_quantile_975(40) == pytest.approx(2.021, abs=1e-3)
    assert t_quantile_975(120) == pytest.approx(1.980, abs=1e-3)


def test_the_interval_is_the_paired_t_interval_over_repeats() -> None:
    # Per-repeat speedups 10%, 12%, 8%: mean 10, sd 2, half-width 4.303 * 2 / sqrt(3).
    est = paired_speedup([(0.9, 1.0), (0.88, 1.0), (0.92, 1.0)])
    assert est is not None and est.n == 3
    assert est.speedup_pct == pytest.approx(10.0)
    assert est.low_pct == pytest.approx(10.0 - 4.303 * 2 / 3**0.5)
    assert est.high_pct == pytest.approx(10.0 + 4.303 * 2 / 3**0.5)
    assert est.significant is True
    noisy = paired_speedup([(0.9, 1.0), (1.05, 1.0)])
    assert noisy is not None and noisy.significant is False  # the interval holds 0
    one = paired_speedup([(0.5, 1.0)])
    assert one is not None and one.significant is None and not one.measured_noise
    assert paired_speedup([]) is None


@pytest.mark.parametrize("repeats", [2, 3, 5])
def test_an_aa_comparison_is_called_significant_about_5_percent_of_the_time(repeats: int) -> None:
    """Two runs of one engine on a noisy machine: run-to-run noise of 20% (far more than
    the steps inside a run show) must not pass for a speedup. A bootstrap over 2 repeats
    would call half of these significant."""
    rng = random.Random(31)
    trials = 4000
    hits = 0
    for _ in range(trials):
        pairs = [(rng.lognormvariate(0, 0.2), rng.lognormvariate(0, 0.2)) for _ in range(repeats)]
        est = paired_speedup(pairs)
        hits += bool(est and est.significant)
    assert 0.02 < hits / trials < 0.08


def test_report_cells_carry_the_interval_the_repeats_and_the_verdict(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    times = {"yafsdp": [0.90, 0.88, 0.92], "fsdp1": [1.0, 1.0, 1.0]}
    for engine, runs in times.items():
        for r, t in enumerate(runs):
            write_job(sweep, f"{engine}{2 - r}", engine=engine, repeat=r, repeats=3,
                      step_times=[t] * 5)  # fmt: skip
    # a second point where the repeats disagree in sign: not significant
    for r, (ty, tf) in enumerate([(0.9, 1.0), (1.05, 1.0), (0.97, 1.0)]):
        write_job(sweep, f"y256_{r}", engine="yafsdp", seq_len=256, repeat=r, repeats=3,
                  step_times=[ty] * 5)  # fmt: skip
        write_job(sweep, f"f256_{r}", engine="fsdp1", seq_len=256, repeat=r, repeats=3,
                  step_times=[tf] * 5)  # fmt: skip
    text = build_report([sweep], tmp_path / "out").read_text()
    row = published_row(text)
    assert row[4] == "10.00% [5.0, 15.0], 3 repeats, significant"
    assert row[5:] == ["0.9000", "1.000"]  # the median over the repeats' medians
    lines = text.splitlines()
    second = next(ln for ln in lines if ln.startswith("| llama_tiny | 2 | 256 | 0 | "))
    assert ", 3 repeats, n.s. |" in second
    assert "**Run-to-run noise was not measured**" not in text
    assert "Duplicate runs" not in text, "a sweep's repeats are not duplicates"
    timing = text.split("## Iteration time and noise")[1].split("##")[0]
    assert "| engine | repeat |" in timing  # one row per run, each named, in repeat order
    runs = [
        ln.split(" | ")[4:6]
        for ln in timing.splitlines()
        if ln.startswith("| llama_tiny | 2 | 128")
    ]
    assert runs == [["yafsdp", "0"], ["yafsdp", "1"], ["yafsdp", "2"],
                    ["fsdp1", "0"], ["fsdp1", "1"], ["fsdp1", "2"]]  # fmt: skip


def test_one_repeat_is_never_a_verdict(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_job(sweep, "0", engine="yafsdp", step_times=[0.5] * 5)
    write_job(sweep, "1", engine="fsdp1", step_times=[1.0] * 5)
    text = build_report([sweep], tmp_path / "out").read_text()
    row = published_row(text)
    assert row[4] == "50.00%, 1 repeat (run-to-run noise not measured)"
    assert "**Run-to-run noise was not measured** at every point (1 repeat)" in text


def test_points_whose_runs_met_uneven_interference_are_flagged(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    quiet = {"other_cpu_share": 0.05, "load1_start": 0.1, "load1_end": 0.2}
    busy = {"other_cpu_share": 0.60, "load1_start": 3.0, "load1_end": 4.0}
    for r, (y, f) in enumerate([(quiet, quiet), (busy, quiet)]):
        write_job(sweep, f"y{r}", engine="yafsdp", repeat=r, repeats=2, interference=y,
                  step_times=[0.9] * 5)  # fmt: skip
        write_job(sweep, f"f{r}", engine="fsdp1", repeat=r, repeats=2, interference=f)
    text = build_report([sweep], tmp_path / "out").read_text()
    assert published_row(text)[4].endswith("⚠ uneven interference")
    assert "llama_tiny, 2 GPUs, seq 128, ckpt 0: other processes took 5% to 60% of the CPUs" in text
    assert "others 60% CPU, load 3.0→4.0" in text  # the job's own cell


def _rounds(path: Path, round_id: str, started: str) -> None:
    """Stamp a hand-made result with the round it ran in (as the runner records it)."""
    result = json.loads(path.read_text())
    result.update(round=round_id, started_at=started, ended_at=started)
    path.write_text(json.dumps(result))


def test_repeats_that_ran_in_different_rounds_are_not_paired(tmp_path: Path) -> None:
    """fsdp1's third run was measured by a resume days later: repeat 2 of yafsdp and of
    fsdp1 never ran together, so they are no pair, and the cell says so."""
    sweep = tmp_path / "s"
    for r, (ty, tf) in enumerate([(0.90, 1.0), (0.92, 1.0), (0.50, 1.0)]):
        y = write_job(sweep, f"y{r}", engine="yafsdp", repeat=r, repeats=3, step_times=[ty] * 5)
        f = write_job(sweep, f"f{r}", engine="fsdp1", repeat=r, repeats=3, step_times=[tf] * 5)
        _rounds(y, "2026-11-01T10:00:00Z host:1", f"2026-11-01T10:0{r}:00+00:00")
        later = r == 2
        _rounds(f, "2026-11-04T09:00:00Z host:2" if later else "2026-11-01T10:00:00Z host:1",
                f"2026-11-0{4 if later else 1}T10:0{r}:30+00:00")  # fmt: skip
    text = build_report([sweep], tmp_path / "out").read_text()
    row = published_row(text)
    assert row[4].startswith("9.00% [") and "2 repeats (1 from another round)" in row[4]
    assert row[5:] == ["0.9100", "1.000"]  # the medians over the pairs' runs
    assert "ran beside it" not in text
    assert "one round" in text


def test_a_failed_repeat_is_said_and_the_times_are_those_of_the_pairs(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    for r, ty in enumerate([0.90, 0.92, 0.50]):
        write_job(sweep, f"y{r}", engine="yafsdp", repeat=r, repeats=3, step_times=[ty] * 5)
        write_job(sweep, f"f{r}", engine="fsdp1", repeat=r, repeats=3,
                  status="failed" if r == 2 else "ok", error="rank 1: crash" if r == 2 else None,
                  step_times=[1.0] * 5)  # fmt: skip
    text = build_report([sweep], tmp_path / "out").read_text()
    row = published_row(text)
    assert "2 repeats (1 failed)" in row[4]
    assert row[5:] == ["0.9100", "1.000"]  # not 0.9000, the median over every ok run
    # results that record no round: their pairs are not claimed to have run together
    assert "ran beside it" not in text
    assert "no round recorded" in text
