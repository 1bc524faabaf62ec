"""The results table in process holds what result.json holds (lists, dicts), the CSV is its
JSON-text export and reads back the same; the report reads metrics by Metrics field names,
and a result.json that names its engine by label alone is matched with the other engines."""

from __future__ import annotations

import ast
import csv
import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
from sweep_fixtures import write_job

from harness.engines.registry import ENGINES
from harness.report import build_report
from harness.report.matching import METRICS, metric
from harness.results.table import collect_results, read_results_csv, write_results_csv

REPORT_DIR = Path(__file__).resolve().parents[2] / "harness" / "report"


def set_engine(job_dir: Path, engine: object) -> None:
    """Rewrite a job's recorded config.engine, as an older or hand-written file holds it."""
    path = job_dir / "result.json"
    data = json.loads(path.read_text())
    data["config"]["engine"] = engine
    path.write_text(json.dumps(data))


def test_lists_and_dicts_stay_objects_in_process(sweep: Path) -> None:
    row = collect_results(sweep).set_index("job_dir").loc["0"]
    assert row["step_times_s"] == [0.9] * 5
    assert row["profile_traces"] == ["traces/rank0.json.gz", "traces/rank1.json.gz"]
    assert row["memory_breakdown"] == {"params": 10, "grads": 10}


def test_the_csv_holds_json_text_and_reads_back_as_the_table(sweep: Path) -> None:
    engine = asdict(ENGINES["yafsdp"].config())
    set_engine(sweep / "0", {**engine, "groups": [["layers.0"], ["output"]]})
    table = collect_results(sweep).set_index("job_dir")
    with open(write_results_csv(sweep)) as f:
        cells = {r["job_dir"]: r for r in csv.DictReader(f)}
    assert cells["0"]["losses"] == "[7.6, 7.5, 7.3, 7.2, 7.0]"
    assert cells["0"]["memory_breakdown"] == '{"params": 10, "grads": 10}'
    assert cells["0"]["config.engine.groups"] == '[["layers.0"], ["output"]]'
    assert cells["0"]["predicted"] == "null"  # recorded as null, not left out
    assert cells["4"]["losses"] == "[]" and cells["4"]["predicted"] == ""  # an OOM: none

    back = read_results_csv(sweep / "results.csv").set_index("job_dir").loc[0]
    for column in ("losses", "step_times_s", "memory_breakdown", "profile_traces"):
        assert back[column] == table.loc["0", column]
    assert back["config.engine.groups"] == [["layers.0"], ["output"]]
    assert back["config.engine.label"] == "yafsdp"  # text stays text


def test_a_misspelt_metric_fails_loudly() -> None:
    row = pd.Series({"iteration_time_s": 1.5})
    assert metric(row, "iteration_time_s") == 1.5
    assert metric(row, "mfu") is None  # a metric this job did not measure
    with pytest.raises(KeyError, match="'iteration_time' is not a metric"):
        metric(row, "iteration_time")


def test_every_metric_the_report_names_is_a_metrics_field() -> None:
    named = set()
    for source in REPORT_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "metric":
                name = node.args[1]
                assert isinstance(name, ast.Constant), f"{source.name}: metric name not literal"
                named.add(name.value)
    assert len(named) >= 15
    assert named <= METRICS


def test_an_engine_given_by_its_label_is_compared_with_the_others(
    tmp_path: Path,
) -> None:
    sweep = tmp_path / "s"
    write_job(sweep, "0", engine="yafsdp", step_times=[0.9] * 5)
    write_job(sweep, "1", engine="fsdp1", step_times=[1.0] * 5)
    write_job(sweep, "2", engine="fsdp1", seq_len=256, step_times=[2.0] * 5)
    set_engine(sweep / "0", "yafsdp")
    set_engine(sweep / "1", asdict(ENGINES["fsdp1"].config()))
    set_engine(sweep / "2", asdict(ENGINES["fsdp1"].config()))

    row = collect_results(sweep).set_index("job_dir").loc["0"]
    assert (row["engine"], row["config.engine.name"]) == ("yafsdp", "yafsdp")
    text = build_report([sweep], tmp_path / "out").read_text()
    assert (
        "| llama_tiny | 2 | 128 | 0 | 10.00%, 1 repeat (run-to-run noise not measured) "
        "| 0.9000 | 1.000 |"
    ) in text
    assert "engine." not in text.split("## Speedup tables")[1].split("## How each")[0]


def test_an_unknown_engine_label_is_refused_naming_the_fix(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_job(sweep, "0", engine="yafsdp")
    write_job(sweep, "1", engine="fsdp1")
    set_engine(sweep / "1", "fsdp9")
    df = collect_results(sweep)
    assert list(df["job_dir"]) == ["0"]
    (problem,) = df.attrs["problems"]
    assert problem.startswith("unusable result file 1/result.json: config.engine='fsdp9' is ")
    assert "write the label of the engine the job ran" in problem
