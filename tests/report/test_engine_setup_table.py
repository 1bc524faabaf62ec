"""The report's "How each engine was set up" table, on a hand-made results table."""

from __future__ import annotations

import pandas as pd

from harness.report.engine_setup import compact, engine_setup_table


def _row(engine: str, model: str = "llama_tiny", **settings: object) -> dict[str, object]:
    point = {"model": model, "seq_len": 128, "ckpt_layers": settings.get("ckpt_layers", 0)}
    return {"engine": engine, **point, "engine_settings": settings}


def test_groups_and_flags_read_as_short_cells() -> None:
    groups = [["tok_embeddings"], *[[f"layers.{i}"] for i in range(8)], ["norm", "output"]]
    assert compact(groups) == "tok_embeddings; layers.0 … layers.7 (one each); norm+output"
    assert compact([True] * 9 + [False]) == "True ×9, False"
    assert compact(["layers.0", "layers.1", "output"]) == "layers.0; layers.1; output"
    assert compact(None) == "None"


def test_one_column_per_engine_in_registry_order_and_varying_values_listed() -> None:
    df = pd.DataFrame(
        [
            _row("fsdp2", reduce_dtype="float32", ckpt_layers=0),
            _row("yafsdp", reduce_dtype="float32", ckpt_layers=0, units=["layers.0"]),
            _row("fsdp2", reduce_dtype="float32", ckpt_layers=1),
            {"engine": "fsdp1", "engine_settings": None},  # a failed job recorded none
        ]
    )
    header, rows = engine_setup_table(df)
    assert header == ["setting", "yafsdp", "fsdp2"]
    table = {r[0]: r[1:] for r in rows}
    assert table["reduce_dtype"] == ["float32", "float32"]
    # differing values each after its jobs: the model alone does not tell these apart
    assert table["ckpt_layers"] == [
        "0", "llama_tiny seq 128 ckpt 0: 0<br>llama_tiny seq 128 ckpt 1: 1"
    ]  # fmt: skip
    assert table["units"] == ["layers.0", "—"]


def test_no_settings_no_table() -> None:
    assert engine_setup_table(pd.DataFrame({"engine": ["yafsdp"]})) == ([], [])


def test_a_setting_that_differs_by_model_is_one_short_line_per_model() -> None:
    small = "separate_ends: buffers 2×262K + 2×197K, staging 197K elements"
    large = "separate_ends: buffers 2×2.1M + 2×786K, staging 786K elements"
    df = pd.DataFrame([_row("yafsdp", "llama_tiny", buffer_plan=small),
                       _row("yafsdp", "llama_mini", buffer_plan=large),
                       _row("yafsdp", "llama_mini", buffer_plan=large)])  # fmt: skip
    _, [(_, cell)] = engine_setup_table(df)
    assert cell == f"llama_tiny: {small}<br>llama_mini: {large}"
