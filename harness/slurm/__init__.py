"""SLURM launching: `hydra/launcher=slurm`, one SLURM task per rank, every job its own shape.

- resources.py  nodes/tasks/GPUs of a job, refusal of GPU counts that do not split
- sweep.py      submitter: plan, submit all, wait, decide statuses (the Hydra launcher's body)
- task.py       what each SLURM task runs: one rank of the Hydra job
- rank.py       the rank's distributed environment and its outcome file
- job_end.py    the job's status from all ranks plus sacct; corrects result.json
- dry_run.py    dry_run=true: each job checked and planned here, its sbatch request printed
- adopt.py      a resume takes over the jobs a dead submitter left queued or running
- hydra_plugins/yafsdp_bench_slurm  the plugin class Hydra instantiates
"""

from __future__ import annotations

import sys
from pathlib import Path

PLUGIN_ROOT = Path(__file__).resolve().parent  # holds hydra_plugins/yafsdp_bench_slurm


def register_plugin() -> None:
    """Make the launcher plugin importable and known to Hydra; call before Hydra starts.

    Installed (`pip install .`) the plugin sits in site-packages and Hydra finds it alone.
    From a source checkout (PYTHONPATH only) its directory joins the `hydra_plugins`
    namespace here; with `pip install -e .` setuptools' import hook serves it, which
    Hydra's directory scan cannot see, hence the explicit registration.
    """
    ensure_plugin_importable()
    from hydra.core.plugins import Plugins
    from hydra_plugins.yafsdp_bench_slurm.launcher import SlurmLauncher

    Plugins.instance().register(SlurmLauncher)


def register_sweeper() -> None:
    """Make `hydra/sweeper=alternating` (harness.sweep.order's order) known to Hydra; call
    before Hydra starts. Its plugin sits beside the launcher's (PLUGIN_ROOT)."""
    ensure_plugin_importable()
    from hydra.core.plugins import Plugins
    from hydra_plugins.yafsdp_bench_sweeper.sweeper import AlternatingSweeper

    Plugins.instance().register(AlternatingSweeper)


def ensure_plugin_importable() -> None:
    """Let `hydra_plugins.yafsdp_bench_slurm` (and the sweeper beside it) import from a
    source checkout too (also in SLURM tasks, where Hydra's state that mentions the plugin
    is unpickled)."""
    try:
        import hydra_plugins.yafsdp_bench_slurm  # noqa: F401
        import hydra_plugins.yafsdp_bench_sweeper  # noqa: F401
    except ImportError:
        sys.path.append(str(PLUGIN_ROOT))
