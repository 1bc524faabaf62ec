"""`hydra/sweeper=alternating`: the basic sweeper's jobs, reordered and repeated."""

from __future__ import annotations

import sys

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.types import Override


class AlternatingSweeper(BasicSweeper):
    """Hydra's basic sweeper (same `params`, same `max_batch_size`), whose job list is put
    in harness.sweep.order's order: a grid point's engines alternate, `repeats` times."""

    def split_arguments(  # type: ignore[override]  # an instance method: it reads the config
        self, overrides: list[Override], max_batch_size: int | None
    ) -> list[list[list[str]]]:
        from harness.sweep.order import SweepRefused, alternate, checked_repeats

        assert self.config is not None
        keys = [(o.get_key_element(), o.is_sweep_override()) for o in overrides]
        try:
            repeats = checked_repeats(keys, self.config.get("repeats", 1))
        except SweepRefused as e:
            print(f"[harness] refused: {e}", file=sys.stderr)
            sys.exit(2)
        jobs = [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
        ordered = alternate(jobs, repeats)
        return list(BasicSweeper.split_overrides_to_chunks(ordered, max_batch_size))
