"""Hydra callbacks: aggregate a sweep's results when its multirun ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class AggregateResults(Callback):
    """Write `<sweep dir>/results.csv` from every job's result.json."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from harness.results import write_results_csv

        path = write_results_csv(Path(config.hydra.sweep.dir))
        print(f"[harness] sweep results: {path}")
