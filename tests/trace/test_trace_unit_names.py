"""One unit, one name across the trace tools and the planner: the module path.

Fast: a trace written before yafsdp named its ranges by path (`yafsdp.all_gather.unit1`)
is shown by path where the job recorded its units (result.json `engine_settings.units`),
and as it is where not, by `summarize --units`, `attribute --json` and `why`; FSDP2's
group of the final norm and the output reads `output`.
Slow: one model (llama_tiny) planned and run, profiled, under yafsdp and FSDP2: the
planner's program and `--cycle`, and both jobs' traced units, name the same units.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.jobdir.result import make_result, write_result
from harness.models import get_shape
from harness.models.unit_names import shown, unit_names
from harness.plan.time.cycle import cycle
from harness.plan.time.simulate import simulate
from harness.trace.__main__ import main
from harness.trace.diagnose import causes
from harness.trace.diagnose.attribute import StepAttribution
from harness.trace.jobs import job_units_of, why
from tests.plan.engine_capture import job
from tests.plan.planned import program
from tests.trace.synthetic import Kernel, nccl, write_gpu_trace

ROOT = Path(__file__).resolve().parents[2]
UNITS = ["tok_embeddings", "layers.0", "layers.1", "output"]
AG = causes.COMM_ALL_GATHER


def _job(root: Path, name: str, label: str, annotation: str, units: list[str] | None) -> Path:
    """A 2-rank job of two steps, each an exposed all-gather in `annotation`, then compute."""
    job = root / name
    config = {"model": "llama_tiny", "gpus": 2, "seq_len": 128, "ckpt_layers": 0,
              "micro_batch": 1, "grad_accum": 1, "dtype": "bf16", "seed": 0,
              "engine": {"name": label, "label": label}}  # fmt: skip
    settings = {"units": units} if units is not None else None
    write_result(job, make_result(status="ok", config=config, engine_settings=settings,
                                  metrics={"iteration_time_s": 1.5e-3}))  # fmt: skip
    for rank in (0, 1):
        ks = [k for s in (1, 2)
              for k in (nccl(s, 20, s * 1e4, 500.0, annotation=annotation),
                        Kernel(s, 7, s * 1e4 + 500.0, 1000.0))]  # fmt: skip
        write_gpu_trace(job / f"traces/rank{rank}.json", ks, rank=rank, world_size=2)
    return job


def _units_of(steps: list[dict]) -> set[str]:
    return {u for s in steps for per_unit in s["by_unit"].values() for u in per_unit}


def test_an_old_trace_is_shown_by_path_where_the_job_recorded_its_units(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _job(tmp_path, "old", "yafsdp", "yafsdp.all_gather.unit1", UNITS)
    assert main(["summarize", str(job), "--units"]) == 0
    out = capsys.readouterr().out
    assert "yafsdp.all_gather.unit1" in out and "| layers.0 " in out
    assert main(["attribute", str(job), "--json"]) == 0
    assert _units_of(json.loads(capsys.readouterr().out)) == {"layers.0"}


def test_an_old_trace_without_its_units_is_shown_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _job(tmp_path, "old", "yafsdp", "yafsdp.all_gather.unit1", None)
    assert main(["attribute", str(job), "--json"]) == 0
    assert _units_of(json.loads(capsys.readouterr().out)) == {"unit1"}


def test_why_names_a_unit_alike_in_an_old_yafsdp_trace_and_an_fsdp2_one(tmp_path: Path) -> None:
    old = _job(tmp_path, "old", "yafsdp", "yafsdp.all_gather.unit1", UNITS)
    fsdp2 = _job(tmp_path, "fsdp2", "fsdp2", "FSDP::all_gather (layers.0)", None)
    table = {old: {AG: {"unit1": 2e-4, "unit3": 1e-4}}, fsdp2: {AG: {"layers.0": 5e-4,
             "norm, output": 2e-4}}}  # fmt: skip

    def attribute(job_dir: Path) -> list[StepAttribution]:
        by_unit = table[Path(job_dir)]
        step_s = 1e-3 + sum(by_unit[AG].values())
        return [StepAttribution(rank=r, step=s, start_us=0.0, step_s=step_s,
                                causes={AG: step_s - 1e-3, causes.COMPUTE_GEMM_ATTENTION: 1e-3},
                                by_unit=by_unit)
                for r in (0, 1) for s in (1, 2)]  # fmt: skip

    found = why(old, fsdp2, attribute)
    (term,) = [t for t in found["terms"] if t["cause"] == AG]
    assert term["units"] == {"layers.0": pytest.approx(3e-4), "output": pytest.approx(1e-4)}


# ---- one model, planned and run under yafsdp and FSDP2 -----------------------------------

ENGINES = ("yafsdp", "fsdp2")
N_LAYERS = get_shape("llama_tiny").n_layers
MODEL_UNITS = set(unit_names(N_LAYERS))  # tok_embeddings, layers.0, ..., output
NOT_MODULES = {"resident", "clip", "shards", "engine", "all", ""}  # the engines' own


@pytest.fixture(scope="module")
def real_jobs(profiled_jobs: dict[str, Path]) -> dict[str, Path]:
    return {engine: profiled_jobs[engine] for engine in ENGINES}


def _unit_rows(job_dir: Path, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    """The job's unit table, as `summarize --json` prints it."""
    assert main(["summarize", str(job_dir), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["units"]


def _planned_units(engine: str) -> tuple[set[str], str]:
    """Every unit the planner's program names, and the unit `--cycle` explains."""
    ops = program(job(engine, 2, model="llama_tiny"))
    found = cycle(ops, simulate(ops))
    assert found is not None
    return {op.unit for op in ops}, found["unit"]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_the_plan_and_the_traces_name_the_same_units(
    engine: str, real_jobs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _unit_rows(real_jobs[engine], capsys)
    traced = {shown(r["unit"], job_units_of(real_jobs[engine])) for r in rows}
    planned, cycle_unit = _planned_units(engine)
    assert traced - NOT_MODULES == MODEL_UNITS
    assert planned - NOT_MODULES == MODEL_UNITS
    assert cycle_unit in MODEL_UNITS
    if engine == "yafsdp":  # its ranges name units by path, as it recorded them
        assert "yafsdp.all_gather.layers.0" in {r["annotation"] for r in rows}
        assert job_units_of(real_jobs[engine]) == unit_names(N_LAYERS)
