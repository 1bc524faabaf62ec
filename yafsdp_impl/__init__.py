"""A YaFSDP-style sharded data-parallel engine: preallocated buffers, ordered collectives.

The names below are imported on first use, so that the torch-free modules of the package
(`yafsdp_impl.annotation_names`) can be imported where torch is not.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from yafsdp_impl.api import YaFSDP, byte_classes, held_bytes
    from yafsdp_impl.layout import is_norm

__all__ = ["YaFSDP", "byte_classes", "held_bytes", "is_norm"]

_HOMES = {
    "YaFSDP": "yafsdp_impl.api",
    "byte_classes": "yafsdp_impl.api",
    "held_bytes": "yafsdp_impl.api",
    "is_norm": "yafsdp_impl.layout",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
