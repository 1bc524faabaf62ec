"""One point of a plan named on the command line (`--why model=llama2_7b,gpus=64`)."""

from __future__ import annotations

from typing import Any

from harness.config import JobConfig
from harness.jobdir.grid_point import point_words


class PlanError(ValueError):
    pass


POINT_KEYS = {"model": "model", "gpus": "gpus", "seq": "seq_len", "seq_len": "seq_len",
              "ckpt": "ckpt_layers", "ckpt_layers": "ckpt_layers"}  # fmt: skip


def rows_at(rows: list[dict[str, Any]], point: str) -> list[dict[str, Any]]:
    """The rows of one point named as `model=llama2_7b,gpus=64,seq=2048,ckpt=0` or as the
    point's words, `llama2_7b gpus=64 seq=2048 ckpt=0` (a first word without `=` is the
    model); any of these fields, the rest may be left out where only one point has the ones
    given."""
    wanted: dict[str, str] = {}
    for i, part in enumerate(p for p in point.replace(" ", ",").split(",") if p):
        key, _, value = part.partition("=") if "=" in part or i else ("model", "=", part)
        if key not in POINT_KEYS or not value:
            raise PlanError(f"--why {point}: {part!r} is not field=value of "
                            f"{', '.join(sorted(POINT_KEYS))}")  # fmt: skip
        wanted[POINT_KEYS[key]] = value
    found = [r for r in rows if all(str(r[k]) == v for k, v in wanted.items())]
    points = sorted({point_words(r) for r in found})
    if len(points) != 1:
        known = "; ".join(sorted({point_words(r) for r in rows}))
        what = "no point" if not points else f"{len(points)} points"
        raise PlanError(f"--why {point} names {what}; the plan's points: {known}")
    return found


def configs_at(configs: list[JobConfig], point: str) -> list[JobConfig]:
    """The configs of the point `--why` names (as `rows_at` chooses): only they are planned."""
    fields = [{k: getattr(c, k) for k in set(POINT_KEYS.values())} for c in configs]
    kept = {id(f) for f in rows_at(fields, point)}
    return [c for c, f in zip(configs, fields, strict=True) if id(f) in kept]
