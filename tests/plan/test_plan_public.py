"""The planner against public measured FSDP runs (`harness.plan.calibrate.public_runs`),
fitted to none."""

from __future__ import annotations

import pytest

from harness.plan.calibrate.public_runs import (
    LEFT_OUT,
    RUNS,
    SPEEDUP_LEFT_OUT,
    SPEEDUP_RUNS,
    SpeedupRun,
    comparison,
    median_abs_error,
    predict_speedup,
)

FLOOR = 0.05  # median absolute error of iteration time over the public rows


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return comparison()


def test_median_error_over_the_public_runs_is_within_the_floor(rows: list[dict]) -> None:
    assert len(rows) == len(RUNS) >= 5
    assert median_abs_error(rows) <= FLOOR, [(r["name"], round(r["error"], 3)) for r in rows]


def test_every_run_names_its_source_and_setting(rows: list[dict]) -> None:
    for run in RUNS:
        assert run.source and run.quote and run.setting and run.assumed
        assert str(int(run.tokens_per_s_per_gpu)) in run.quote  # the figure as printed
    assert all(what and why for what, why in LEFT_OUT)


def test_every_prediction_is_a_time_with_its_terms(rows: list[dict]) -> None:
    for r in rows:
        assert r["predicted_s"] > 0 and 0 < r["mfu"] < 1


@pytest.fixture(scope="module")
def speedups() -> list[dict]:
    return [predict_speedup(run) for run in SPEEDUP_RUNS]


def test_engine_against_engine_rows_quote_their_figures() -> None:
    assert SPEEDUP_RUNS and all(what and why for what, why in SPEEDUP_LEFT_OUT)
    for run in SPEEDUP_RUNS:
        assert run.source.startswith("pytorch/") and "https://" in run.source
        assert run.setting and run.assumed and run.engines[0] != run.engines[1]
        for low, high in run.tokens_per_s:
            assert f"{low:.0f}-{high:.0f}" in run.quote  # the range as printed
        assert not any(o.startswith("engine=") for o in run.overrides)


def test_the_measured_speedup_is_the_quoted_throughputs_ratio() -> None:
    run = SpeedupRun("x", "s", "q", "set", ("fsdp2", "fsdp1"), (),
                     ((6100, 6300), (6100, 6200)), "a")  # fmt: skip
    mid, low, high = run.measured()
    assert mid == pytest.approx(1 - 6150 / 6200)
    assert (low, high) == (pytest.approx(1 - 6200 / 6100), pytest.approx(1 - 6100 / 6300))


def test_no_yafsdp_readme_row_is_a_test_or_fit_row() -> None:
    sources = [run.source for run in RUNS] + [run.source for run in SPEEDUP_RUNS]
    for source in sources:
        assert "yafsdp" not in source.lower() and "yandex" not in source.lower()


def test_engine_against_engine_predictions_fall_in_the_measured_range(speedups) -> None:
    """Predicted from the hardware profile alone, not fitted: the planner's speedup of one
    engine over the other lies within what the source measured."""
    for r in speedups:
        low, high = r["measured_range"]
        assert low <= r["predicted_speedup"] <= high, r


def test_the_accuracy_page_is_what_the_command_prints_now(rows: list[dict]) -> None:
    """docs/planner-accuracy.md is written by `python -m harness.plan.calibrate.accuracy_doc`; the
    public runs' plans are shared with the tests above (planned once per process)."""
    from harness.plan.calibrate.accuracy_doc import DOC, render

    assert DOC.read_text() == render(), "run: python -m harness.plan.calibrate.accuracy_doc"
