"""Engine adapters. The table of engines is `registry.py` (torch-free); the door every
adapter comes through is `base.py`."""

from __future__ import annotations

from harness.engines.adapters import get_engine
from harness.engines.registry import BASELINES, ENGINES, EngineSpec

__all__ = ["BASELINES", "ENGINES", "EngineSpec", "get_engine"]
