"""Where the upstream YaFSDP library (`ya_fsdp`) comes from, and whether it is here; no
torch, so the pre-flight checks can ask before any process starts.

It is installed from a pinned commit of its repository, never from PyPI, where the name
`yandex-ya-fsdp` is a placeholder against dependency confusion.
"""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys

PINNED_COMMIT = "669fc366f1fb9dcd311c862a1c7450990c8d3721"
INSTALL = f'pip install "ya-fsdp @ git+https://github.com/yandex/YaFSDP@{PINNED_COMMIT}"'


IMPORT_TIMEOUT_S = 300  # it imports torch, which a cold file cache makes slow


def available() -> bool:
    """Whether the upstream library is importable here."""
    return import_problem() is None


@functools.cache
def import_problem() -> str | None:
    """Why `import ya_fsdp` fails here, or None when it works. It is imported in a child
    process (this one stays without torch): a library that is installed but built for
    another torch fails only when imported, which a job would find out ranks later."""
    if importlib.util.find_spec("ya_fsdp") is None:
        return "it is not installed"
    try:
        proc = subprocess.run([sys.executable, "-c", "import ya_fsdp"], capture_output=True,
                              text=True, timeout=IMPORT_TIMEOUT_S, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"`import ya_fsdp` did not finish within {IMPORT_TIMEOUT_S} s"
    if proc.returncode == 0:
        return None
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    return f"it is installed but fails to import ({lines[-1] if lines else 'no message'})"
