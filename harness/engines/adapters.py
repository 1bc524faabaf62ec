"""Each adapter name's engine class, imported only when a job runs: each pulls in its part of
torch, and the registry beside it must stay importable without torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.engines.registry import ENGINE_SPECS

if TYPE_CHECKING:
    from harness.engines.base import Engine


def _yafsdp() -> type[Engine]:
    from harness.engines.yafsdp import YaFSDPEngine

    return YaFSDPEngine


def _fsdp1() -> type[Engine]:
    from harness.engines.fsdp1 import FSDP1Engine

    return FSDP1Engine


def _fsdp2() -> type[Engine]:
    from harness.engines.fsdp2 import FSDP2Engine

    return FSDP2Engine


def _deepspeed() -> type[Engine]:
    from harness.engines.deepspeed import DeepSpeedEngine

    return DeepSpeedEngine


def _ya_fsdp() -> type[Engine]:
    from harness.engines.ya_fsdp import YaFSDPUpstreamEngine

    return YaFSDPUpstreamEngine


def _local() -> type[Engine]:
    from harness.engines.local import LocalEngine

    return LocalEngine


# EngineConfig.name -> its adapter class (a test holds that every registered name has one).
ADAPTERS: dict[str, Callable[[], type[Engine]]] = {
    "yafsdp": _yafsdp,
    "fsdp1": _fsdp1,
    "fsdp2": _fsdp2,
    "deepspeed": _deepspeed,
    "ya_fsdp": _ya_fsdp,
    "local": _local,
}


def get_engine(name: str) -> Engine:
    """The adapter for EngineConfig.name."""
    names = dict.fromkeys(s.name for s in ENGINE_SPECS)
    if name not in names or name not in ADAPTERS:
        raise ValueError(f"engine={name!r} is unknown; choose one of: {', '.join(names)}")
    return ADAPTERS[name]()()
