"""`python -m harness` with one failure planted in-process, for the tests of a sweep's end:
`python tests/sweep/faulty_runner.py <fault> <harness arguments...>`.

Faults (each hits only the jobs with seq_len=64, so a sweep also has a job that runs):
- raise       the job's run raises ZeroDivisionError (as transformers does for a config
              with num_attention_heads=0)
- enospc      the disk fills while the job runs: a rank's atomic writer leaves its temporary
              and the write fails with ENOSPC
- enospc_csv  the disk is full when the sweep writes results.csv
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import harness.cli as cli
import harness.results.table as table


def _planted(fault: str) -> None:
    run_job = cli.run_job

    def faulty_run_job(cfg, job_dir, **kwargs):  # type: ignore[no-untyped-def]
        if cfg.seq_len != 64:
            return run_job(cfg, job_dir, **kwargs)
        if fault == "raise":
            raise ZeroDivisionError("integer division or modulo by zero")
        target = Path(job_dir) / "ranks" / "rank0.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        (target.parent / ".rank0.json.tmp").write_text('{"rank": 0, "sta')
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))

    def full_disk_csv(df, path):  # type: ignore[no-untyped-def]
        Path(path).write_text("status\nok\n")  # a first block lands, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    if fault == "enospc_csv":
        table.to_csv = full_disk_csv
    else:
        cli.run_job = faulty_run_job


if __name__ == "__main__":
    _planted(sys.argv.pop(1))
    cli.main()
