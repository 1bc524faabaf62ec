"""Engine adapters by name. To add one: write a class with `name` and `wrap(model, ctx)`
(see `base.py`), then register it here."""

from __future__ import annotations

from harness.engines.base import DTYPES, Engine, RunContext, Wrapped


def get_engine(name: str) -> Engine:
    # Imported lazily: each adapter pulls in its own part of torch.distributed.
    if name == "local":
        from harness.engines.local import LocalEngine

        return LocalEngine()
    if name == "fsdp1":
        from harness.engines.fsdp1 import FSDP1Engine

        return FSDP1Engine()
    if name == "fsdp2":
        from harness.engines.fsdp2 import FSDP2Engine

        return FSDP2Engine()
    if name == "yafsdp":
        from harness.engines.yafsdp import YaFSDPEngine

        return YaFSDPEngine()
    raise ValueError(f"engine={name!r} is unknown; choose one of: local, fsdp1, fsdp2, yafsdp")


__all__ = ["DTYPES", "Engine", "RunContext", "Wrapped", "get_engine"]
