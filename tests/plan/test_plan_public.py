"""The planner against public measured FSDP runs (`harness.plan.public_runs`), fitted to none."""

from __future__ import annotations

import pytest

from harness.plan.public_runs import LEFT_OUT, RUNS, comparison, median_abs_error

FLOOR = 0.15  # median absolute error of iteration time over the public rows


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
