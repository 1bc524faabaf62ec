"""Repeats run in alternating order: within a grid point the engines take turns (A B A B),
never all of A's runs and then all of B's; each repeat is its own job directory; bad
repeat settings are refused before anything runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

from harness.config import JobConfig
from harness.sweep.order import SweepRefused, alternate, checked_repeats
from harness.validate import validation_errors
from tests.processes import run_module


def product(*arguments: str) -> list[list[str]]:
    """The job list Hydra's basic sweeper makes of these arguments (the last varies fastest)."""
    overrides = OverridesParser.create().parse_overrides(list(arguments))
    return BasicSweeper.split_arguments(overrides, None)[0]


def engines_and_repeats(jobs: list[list[str]]) -> list[tuple[str, str, int]]:
    def get(job: list[str], key: str, default: str) -> str:
        return next((o.split("=", 1)[1] for o in job if o.startswith(key + "=")), default)

    return [
        (get(j, "seq_len", "-"), get(j, "engine", "-"), int(get(j, "repeat", "0"))) for j in jobs
    ]


def test_engines_alternate_within_each_point_whatever_the_argument_order() -> None:
    # The engine comes first on the command line: the basic sweeper would run all of
    # yafsdp's jobs, then all of fsdp1's.
    jobs = product("engine=yafsdp,fsdp1,fsdp2", "seq_len=32,64")
    assert [e for _, e, _ in engines_and_repeats(jobs)][:2] == ["yafsdp", "yafsdp"]
    ordered = engines_and_repeats(alternate(jobs, 3))
    abc = ["yafsdp", "fsdp1", "fsdp2"]
    turns = [abc, abc[1:] + abc[:1], abc[2:] + abc[:2]]  # each repeat starts one engine later
    assert ordered == [("32", e, r) for r in range(3) for e in turns[r]] + [
        ("64", e, r) for r in range(3) for e in turns[r]
    ]


def test_repeat_zero_keeps_the_name_a_sweep_without_repeats_gives() -> None:
    jobs = product("engine=yafsdp,fsdp1", "seq_len=32")
    assert alternate(jobs, 1) == jobs
    two = alternate(jobs, 2)
    assert two[:2] == jobs and all(job[-1] == "repeat=1" for job in two[2:])


def test_an_engine_override_counts_as_the_engine_not_as_a_point() -> None:
    jobs = product("engine=yafsdp", "engine.label=yafsdp,yafsdp_aa", "seq_len=32,64")
    ordered = alternate(jobs, 2)
    labels = [next(o for o in job if o.startswith("engine.label")) for job in ordered[:4]]
    assert labels == ["engine.label=yafsdp", "engine.label=yafsdp_aa"] + [
        "engine.label=yafsdp_aa",
        "engine.label=yafsdp",
    ]


@pytest.mark.parametrize(
    ("overrides", "repeats", "message"),
    [
        ([], 0, "repeats=0 must be a whole number of at least 1"),
        ([], "3", "repeats=3 must be a whole number"),
        ([("repeats", True)], 2, "repeats is the number of runs of every job, not a sweep axis"),
        ([("repeat", False)], 2, "repeat is set by the sweep"),
    ],
)
def test_bad_repeat_settings_are_refused_by_name(
    overrides: list[tuple[str, bool]], repeats: object, message: str
) -> None:
    with pytest.raises(SweepRefused, match=re.escape(message)):
        checked_repeats(overrides, repeats)
    assert checked_repeats([("repeats", False)], 4) == 4


def test_a_job_config_checks_its_repeat() -> None:
    assert any("repeats=0" in e for e in validation_errors(JobConfig(repeats=0)))
    assert any("repeat=3 is not one of the 3" in e for e in validation_errors(
        JobConfig(repeats=3, repeat=3)))  # fmt: skip
    assert not [e for e in validation_errors(JobConfig(repeats=3, repeat=2)) if "repeat" in e]


def test_a_sweep_runs_its_repeats_in_turn_each_in_its_own_directory(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_module(
        "harness", "-m", "model=llama_tiny", "engine=yafsdp,fsdp1", "seq_len=32",
        "repeats=2", "dry_run=true", f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if " dry run -> " in ln]
    found = [re.search(r"ckpt=0 (\w+) repeat=(\d)  dry run -> \S+/([^/ ]+) ", ln) for ln in lines]
    assert [(m.group(1), m.group(2)) for m in found if m] == [
        ("yafsdp", "0"), ("fsdp1", "0"), ("fsdp1", "1"), ("yafsdp", "1")
    ]  # fmt: skip
    dirs = [m.group(3) for m in found if m]
    assert len(set(dirs)) == 4
    assert dirs[0] == "engine=yafsdp,model=llama_tiny,seq_len=32"  # `repeats` names nothing
    assert dirs[3] == "engine=yafsdp,model=llama_tiny,repeat=1,seq_len=32"
    assert lines[0].startswith("[1/4] ")


def test_a_sweep_with_bad_repeats_is_refused_before_any_job(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_module("harness", "-m", "engine=yafsdp,fsdp1", "repeats=0",
                      f"hydra.sweep.dir={sweep}")  # fmt: skip
    assert proc.returncode == 2
    assert "refused: repeats=0 must be a whole number of at least 1" in proc.stderr
    assert not list(sweep.glob("*/result.json")) and not list(sweep.glob("*/.hydra"))


def test_a_stored_run_stands_whatever_the_number_of_repeats_but_not_for_another_run(
    tmp_path: Path,
) -> None:
    from dataclasses import asdict

    from harness.job.resume import rerun_reason
    from harness.jobdir.result import make_result, write_result

    write_result(tmp_path, make_result(status="ok", config=asdict(JobConfig(repeats=1))))
    assert rerun_reason(tmp_path, asdict(JobConfig(repeats=3))) is None
    reason = rerun_reason(tmp_path, asdict(JobConfig(repeats=3, repeat=1)))
    assert reason is not None and "repeat: 0 -> 1" in reason


def test_a_single_run_with_repeats_says_it_is_one_run_of_them(tmp_path: Path) -> None:
    proc = run_module("harness", "model=llama_tiny", "repeats=3", "dry_run=true",
                      f"hydra.run.dir={tmp_path / 'one'}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "repeats=3 runs each job 3 times in a multirun (-m); this single run is run 0" in (
        proc.stderr
    )
