"""The report's "How each engine was set up" table, on a hand-made results table."""

from __future__ import annotations

import pandas as pd

from harness.report.engine_setup import compact, engine_setup_table


def _row(engine: str, **settings: object) -> dict[str, object]:
    return {"engine": engine, "engine_settings": settings}


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
    assert table["ckpt_layers"] == ["0", "0 / 1"]
    assert table["units"] == ["layers.0", "—"]


def test_no_settings_no_table() -> None:
    assert engine_setup_table(pd.DataFrame({"engine": ["yafsdp"]})) == ([], [])
