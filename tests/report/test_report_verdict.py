"""The report's first screen is the verdict: one line per point and baseline, significant
or not and what to do, each engine's peak, the planner's word; definitions at the end."""

from __future__ import annotations

from pathlib import Path

from sweep_fixtures import write_job

from harness.report import build_report


def _sweep(tmp_path: Path) -> Path:
    sweep = tmp_path / "s"
    busy, quiet = {"other_cpu_share": 0.41}, {"other_cpu_share": 0.0}
    for r, t in enumerate([0.90, 0.88, 0.92]):  # seq 128: yafsdp 10% faster, significant
        write_job(sweep, f"y128_{r}", engine="yafsdp", repeat=r, repeats=3, step_times=[t] * 5)
        write_job(sweep, f"f128_{r}", engine="fsdp1", repeat=r, repeats=3, step_times=[1.0] * 5)
    for r, (ty, tf) in enumerate([(0.9, 1.0), (1.05, 1.0), (0.97, 1.0)]):  # seq 256: n.s.
        write_job(sweep, f"y256_{r}", engine="yafsdp", seq_len=256, repeat=r, repeats=3,
                  step_times=[ty] * 5, interference=busy if r == 1 else quiet)  # fmt: skip
        write_job(sweep, f"f256_{r}", engine="fsdp1", seq_len=256, repeat=r, repeats=3,
                  step_times=[tf] * 5, interference=quiet)  # fmt: skip
    return sweep


def test_the_first_screen_is_the_verdict(tmp_path: Path) -> None:
    text = build_report([_sweep(tmp_path)], tmp_path / "out").read_text()
    head = text.split("\n## ")[0]
    assert "> [!IMPORTANT]" in head and "**Verdict**" in head
    lines = [ln for ln in head.splitlines() if ln.startswith("> - yafsdp vs fsdp1 at ")]
    assert len(lines) == 2
    fast, flat = lines
    assert (
        "llama_tiny, 2 GPUs, seq 128, ckpt 0: yafsdp 10% faster [5, 15], 3 repeats, "
        "significant" in fast
    )
    assert "peak yafsdp 100.0 MiB, fsdp1 100.0 MiB" in fast
    assert "seq 256, ckpt 0: no detectable difference (+3% [" in flat
    assert (
        "other processes took 0%-41% of the CPUs) → rerun on a quiet machine or with "
        "repeats=5" in flat
    )
    assert "Speedup = (T_fsdp - T_yafsdp) / T_fsdp" not in head  # definitions at the end
    assert text.rstrip().split("\n## ")[-1].startswith("Definitions")


def test_runs_of_different_rounds_are_no_comparison_and_say_why() -> None:
    import pandas as pd

    from harness.jobdir.grid_point import GridPoint
    from harness.report.published import verdict_line
    from harness.report.speedups import Speedup

    key = GridPoint.of({"model": "llama_tiny", "gpus": 2, "seq_len": 32, "ckpt_layers": 0})
    ok = pd.Series({"status": "ok"})
    row = Speedup(key, ok, ok, None, None, False, other_round=1)
    line = verdict_line(row, "fsdp1")
    assert line.endswith("no comparison: no pair (1 from another round: rerun both together)")
