"""Where the upstream YaFSDP library (`ya_fsdp`) comes from, and whether it is here; no
torch, so the pre-flight checks can ask before any process starts.

It is installed from a pinned commit of its repository, never from PyPI, where the name
`yandex-ya-fsdp` is a placeholder against dependency confusion.
"""

from __future__ import annotations

import importlib.util

PINNED_COMMIT = "669fc366f1fb9dcd311c862a1c7450990c8d3721"
INSTALL = f'pip install "ya-fsdp @ git+https://github.com/yandex/YaFSDP@{PINNED_COMMIT}"'


def available() -> bool:
    """Whether the upstream library is importable here."""
    return importlib.util.find_spec("ya_fsdp") is not None
