"""The report's pictures as the sections see them: links that `build_report` wrote, and
the Timelines section, each timeline captioned by the job or the grid point it shows."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from harness.jobdir.grid_point import GridPoint, Setting
from harness.report.matching import match_key, point_label


@dataclass(frozen=True)
class Timeline:
    caption: str
    name: str  # the picture's file name where the job or the sweep left it
    link: str  # relative to report.md
    point: GridPoint | None = None  # what a sweep's picture shows; None: not recorded


@dataclass(frozen=True)
class Pictures:
    """Links, relative to report.md, of the pictures build_report wrote."""

    speedup: dict[tuple[str, Setting], str] = field(default_factory=dict)
    memory: str | None = None
    timelines: list[Timeline] = field(default_factory=list)


def timelines(pictures: Pictures) -> list[str]:
    blocks = ["## Timelines"]
    if not pictures.timelines:
        return [*blocks, "No timeline pictures in these sweeps (profiling off or no trace drawn)."]
    blocks.append(
        "Drawn from the profiled steps' traces (one lane per rank and stream: compute, "
        "communication). Copied here from the job directories."
    )
    return blocks + [f"**{t.caption}**\n\n![{t.name}]({t.link})" for t in pictures.timelines]


def job_timeline_caption(row: pd.Series, file_name: str) -> str:
    return f"{point_label(match_key(row))}, {row['engine']}: `{file_name}`"


def sweep_timeline_caption(
    point: GridPoint | None, file_name: str, *, several_settings: bool = False
) -> str:
    """The caption of the sweep's picture of `point` (None: a picture of no known point)."""
    if point is None:
        return f"sweep timeline `{file_name}`"
    setting = f" ({point.setting.label()})" if several_settings else ""
    layers = "layer" if str(point.ckpt_layers) == "1" else "layers"
    return (
        f"{point.model}, {point.gpus} GPUs, seq-len {point.seq_len}, "
        f"{point.ckpt_layers} checkpointed {layers}{setting}: every engine, one profiled step "
        "on the same time scale"
    )
