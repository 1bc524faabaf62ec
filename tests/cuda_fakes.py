"""Stand-ins for `torch.cuda` functions that keep the real signature.

A `lambda` in place of `torch.cuda.mem_get_info` accepts whatever the test author guessed;
`unittest.mock.create_autospec` of the real function raises TypeError, on CPU, for any
call the real one would refuse (a wrong keyword, a missing or extra argument).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any
from unittest import mock

import pytest
import torch

_UNSET: Any = object()


def fake_cuda(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    return_value: Any = _UNSET,
    *,
    side_effect: Any = None,
    module: ModuleType = torch.cuda,
) -> Any:
    """Replace `module.name` (a `torch.cuda` function by default) by an autospec of it that
    returns `return_value` (or what `side_effect` returns); the mock records its calls."""
    real = getattr(module, name)
    returns = {} if return_value is _UNSET else {"return_value": return_value}
    fake = mock.create_autospec(real, side_effect=side_effect, **returns)
    monkeypatch.setattr(module, name, fake)
    return fake
