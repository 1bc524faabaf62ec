"""`hydra/launcher=slurm`: every job its own SLURM allocation (see harness.slurm.sweep)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf


class SlurmLauncher(Launcher):
    def __init__(self, **params: Any) -> None:
        # Imported here: Hydra imports every plugin module at start-up, keep that cheap.
        from harness.slurm.sweep import LauncherParams

        plain: dict[str, Any] = {
            k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
            for k, v in params.items()
        }
        self.params = LauncherParams(**plain)
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from harness.slurm.sweep import launch_sweep

        assert self.config is not None and self.hydra_context is not None
        assert self.task_function is not None
        return launch_sweep(
            hydra_context=self.hydra_context,
            task_function=self.task_function,
            config=self.config,
            params=self.params,
            job_overrides=[list(o) for o in job_overrides],
            initial_job_idx=initial_job_idx,
        )
