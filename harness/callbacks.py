"""Hydra callbacks: aggregate a sweep's results when its multirun ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class AggregateResults(Callback):
    """Write `<sweep dir>/results.csv` and one timeline picture per traced grid point."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from harness.results import collect_results, write_results_csv
        from harness.trace.timeline import draw_sweep_timelines

        sweep_dir = Path(config.hydra.sweep.dir)
        path = write_results_csv(sweep_dir)
        print(f"[harness] sweep results: {path}")
        pictures = draw_sweep_timelines(sweep_dir, collect_results(sweep_dir))
        if pictures:
            print(f"[harness] timelines: {len(pictures)} in {sweep_dir / 'timelines'}")
