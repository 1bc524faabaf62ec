"""The planner's program for a job, as `harness.plan` builds it (A100 profile)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from harness.config import JobConfig
from harness.plan.cli import job_configs
from harness.plan.planner import network, time_case
from harness.plan.time.mechanisms import applicable
from harness.plan.time.simulate import Op
from harness.plan.time.timing import build_program


def priced_config(cfg: JobConfig, hardware: str = "a100_80gb") -> JobConfig:
    """The job on a priced hardware profile (any gives the same sequence of work)."""
    (priced,) = job_configs([
        f"hardware={hardware}", f"model={cfg.model}", f"model_impl={cfg.model_impl}",
        f"engine={cfg.engine.label}", f"gpus={cfg.gpus}", f"seq_len={cfg.seq_len}",
        f"ckpt_layers={cfg.ckpt_layers}", f"grad_accum={cfg.grad_accum}",
        f"dtype={cfg.dtype}", f"micro_batch={cfg.micro_batch}",
        f"engine.reduce_dtype={cfg.engine.reduce_dtype}",
    ])  # fmt: skip
    return priced


def program(cfg: JobConfig, *, mechanisms: frozenset[str] | None = None, **spec: Any) -> list[Op]:
    """The planner's program; `spec` overrides fields of the hardware profile."""
    priced = priced_config(cfg)
    if spec:
        priced = replace(priced, device_spec=replace(priced.device_spec, **spec))
    net = network(priced)
    assert net is not None
    on = frozenset(applicable(cfg.engine.label)) if mechanisms is None else mechanisms
    return build_program(time_case(priced), priced.device_spec, net, on)


def collectives(cfg: JobConfig) -> list[tuple[str, int]]:
    return [(op.kind, op.nbytes) for op in program(cfg) if op.kind]
