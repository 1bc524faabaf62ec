"""What a report is about: every job its sweeps hold, the one job chosen per (grid point,
engine), and what follows from that choice (loss parity, settings, speedup rows)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from harness.jobdir.grid_point import Setting
from harness.report.matching import (
    BASELINES,
    LossParity,
    loss_parity,
    match_key,
    select_runs,
    sort_jobs,
    twin_labels,
)
from harness.report.speedups import Speedup, speedups


@dataclass
class ReportJobs:
    """What the report is about: every job found, and the one chosen per (point, engine)."""

    all_jobs: pd.DataFrame
    sweeps: list[Path]
    problems: list[str] = field(default_factory=list)  # result files left out, and why
    running: list[str] = field(default_factory=list)  # a line per sweep running now

    @cached_property
    def _selected(self) -> tuple[pd.DataFrame, list[str]]:
        return select_runs(self.all_jobs)

    @property
    def jobs(self) -> pd.DataFrame:
        """One job per (grid point, engine)."""
        return self._selected[0]

    @property
    def repeats(self) -> list[str]:
        """Which job was chosen where one ran more than once."""
        return self._selected[1]

    @cached_property
    def parity(self) -> list[LossParity]:
        return loss_parity(self.jobs) if not self.jobs.empty else []

    @cached_property
    def settings(self) -> list[Setting]:
        """The settings of the chosen jobs, in README order."""
        return settings_of(self.jobs)

    @cached_property
    def several_settings(self) -> bool:
        return len(settings_of(self.all_jobs)) > 1 if not self.all_jobs.empty else False

    def baselines(self) -> list[str]:
        """The FSDP baselines that ran, in table order, then YaFSDP's A/A twins."""
        df = self.jobs
        found = [b for b in BASELINES if not df.empty and (df["engine"] == b).any()]
        return found + twin_labels(df)

    def speedup_tables(self, baseline: str) -> list[tuple[Setting, list[Speedup]]]:
        """The published table's rows for `baseline`, one list per setting that has any."""
        parity = self.parity
        out = []
        for setting in self.settings:
            rows = speedups(in_setting(self.jobs, setting), baseline, parity)
            if rows:
                out.append((setting, rows))
        return out


def settings_of(df: pd.DataFrame) -> list[Setting]:
    seen: list[Setting] = []
    for _, row in sort_jobs(df).iterrows():
        s = match_key(row).setting
        if s not in seen:
            seen.append(s)
    return seen


def in_setting(df: pd.DataFrame, setting: Setting) -> pd.DataFrame:
    return df[[match_key(r).setting == setting for _, r in df.iterrows()]]
