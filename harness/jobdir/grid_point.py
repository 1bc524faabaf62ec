"""What identifies a grid point, the one definition every part of the harness uses: the
results table, the report's comparisons and figures, the sweep's timeline pictures, and the
trace tools' comparison of two jobs. It is read from a job's recorded config, so it lives
with the job directory's files, below both the results and the trace tools.

Matched jobs share a grid point (model, gpus, seq_len, ckpt_layers) and a setting (how
they trained); they differ in their engine. No pandas, no torch.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from harness.jobdir.recorded_config import FIELDS_ADDED_LATER

POINT_COLUMNS = ["model", "gpus", "seq_len", "ckpt_layers"]
SETTING_COLUMNS = ["micro_batch", "grad_accum", "dtype", "seed", "model_impl"]
MATCH_COLUMNS = POINT_COLUMNS + SETTING_COLUMNS
# Which run of a job a row is (`repeats=N` runs each job N times). A key of a row beside the
# engine, never part of what matches jobs (a point's repeats are compared with one another)
# and never a variant of the config.
REPEAT_COLUMN = "repeat"


def _cell(value: Any) -> Any:
    """A table cell as the value it stands for: a gap (None, NaN) is None, and a whole
    float is the int it was (a column with gaps turns its ints into floats)."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@dataclass(frozen=True)
class Setting:
    """How a grid point was trained (SETTING_COLUMNS), plus `variant`: the other config
    fields that vary between the jobs shown ("lr=0.01"), so that no job hides another."""

    micro_batch: Any
    grad_accum: Any
    dtype: Any
    seed: Any
    model_impl: Any
    variant: str = ""

    def label(self) -> str:
        """`micro_batch=1, grad_accum=1, dtype=bf16, seed=0, model_impl=native` plus the
        variant, if any."""
        label = ", ".join(f"{c}={getattr(self, c)}" for c in SETTING_COLUMNS)
        return f"{label}, {self.variant}" if self.variant else label


@dataclass(frozen=True)
class GridPoint:
    """What matched jobs share (POINT_COLUMNS and the setting); they differ in `engine`."""

    model: Any
    gpus: Any
    seq_len: Any
    ckpt_layers: Any
    setting: Setting

    @classmethod
    def of(cls, values: dict[str, Any], variant: str = "") -> GridPoint:
        """The point of a job whose MATCH_COLUMNS are `values` (a config, or a table row's
        cells); a field the job predates takes the value such jobs ran with."""
        given = {k: _cell(v) for k, v in values.items()}
        values = {**FIELDS_ADDED_LATER, **{k: v for k, v in given.items() if v is not None}}
        setting = Setting(**{c: values.get(c) for c in SETTING_COLUMNS}, variant=variant)
        return cls(**{c: values.get(c) for c in POINT_COLUMNS}, setting=setting)

    def words(self) -> str:
        """`llama_mini gpus=2 seq=256 ckpt=1`: the one spelling of a point in a line of text
        (the console's job lines, the planner's rows and `--why`, which also reads it)."""
        return f"{self.model} gpus={self.gpus} seq={self.seq_len} ckpt={self.ckpt_layers}"

    def to_dict(self) -> dict[str, Any]:
        """MATCH_COLUMNS and the variant, flat (JSON-ready)."""
        setting = asdict(self.setting)
        return {**{c: getattr(self, c) for c in POINT_COLUMNS}, **setting}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GridPoint:
        return cls.of(data, variant=str(data.get("variant") or ""))

    def file_stem(self, *, with_setting: bool = False) -> str:
        """`llama_tiny_g2_s128_c1`, and the setting after it where points share the rest."""
        stem = f"{self.model}_g{self.gpus}_s{self.seq_len}_c{self.ckpt_layers}"
        if with_setting:
            stem += "_" + re.sub(r"[^A-Za-z0-9]+", "_", self.setting.label()).strip("_")
        return re.sub(r"[^A-Za-z0-9._=-]+", "_", stem)


def point_words(values: dict[str, Any]) -> str:
    """`GridPoint.words` of a config or a row holding POINT_COLUMNS."""
    return GridPoint.of(values).words()
