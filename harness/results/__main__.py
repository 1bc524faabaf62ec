"""`python -m harness.results <sweep dir>`: (re)build a sweep's results.csv, and say whether
the sweep is running now (its lock records: `harness.sweep.running`)."""

import sys
from pathlib import Path

from harness.results import table
from harness.sweep.running import describe_running


def main(argv: list[str] | None = None) -> int:
    def running(sweep: Path) -> list[str]:
        return describe_running([sweep])

    return table.main(argv, notes=running)


if __name__ == "__main__":
    sys.exit(main())
