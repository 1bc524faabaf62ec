"""The command line's overrides checked before Hydra reads them.

Hydra answers a mistyped field (`seqlen=128`) with "Could not override 'seqlen'... use
+seqlen=128", which would only move the typo into the config. The harness answers first,
with the field it most likely meant. `hydra/launcher=submitit_slurm`, the stock Hydra
plugin's name, becomes the harness's own `hydra/launcher=slurm` (which gives every job its
own node count), with a note saying so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SWEEPS_DIR = Path(__file__).resolve().parent.parent / "sweeps"
LAUNCHER_ALIASES = {"submitit_slurm": "slurm"}


def _groups() -> set[str]:
    return {p.name for p in SWEEPS_DIR.iterdir() if p.is_dir()}


def with_launcher_alias(args: list[str]) -> tuple[list[str], list[str]]:
    """`args` with an aliased launcher replaced, and a note for each replacement."""
    out, notes = [], []
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") == "hydra/launcher" and value in LAUNCHER_ALIASES:
            new = LAUNCHER_ALIASES[value]
            notes.append(
                f"[harness] note: hydra/launcher={value} is run as hydra/launcher={new}, the "
                "harness's SLURM launcher on submitit (it gives each job its own node count "
                "and reads its options from sweeps/hydra/launcher/slurm.yaml)"
            )
            arg = f"{key}={new}"
        out.append(arg)
    return out, notes


def _choices(key: str) -> tuple[str, ...] | None:
    """The values a config group (or the model field) takes, or None for any value."""
    if key == "model":
        from harness.models.shapes import MODEL_SHAPES

        return tuple(MODEL_SHAPES)
    folder = SWEEPS_DIR / key
    if key.startswith("hydra") or not folder.is_dir():
        return None
    return tuple(sorted(p.stem for p in folder.glob("*.yaml")))


def value_errors(key: str, value: str) -> list[str]:
    """A message for each value of `key=a,b` that its group has no file for
    (`engine=yafsdb`: "did you mean engine=yafsdp?"); sweep functions (`range(...)`),
    interpolations and Hugging Face configs (`model=hf:...`) are left to Hydra."""
    from harness.validate.common import one_of

    choices = _choices(key)
    if choices is None or any(c in value for c in "()[]{}$"):
        return []
    more = ", or hf:<path to a Hugging Face config.json>" if key == "model" else ""
    found = (one_of(key, v, choices, more=more) for v in value.split(",") if v and not
             (key == "model" and v.startswith("hf:")))  # fmt: skip
    return [e for e in found if e]


def override_errors(args: list[str]) -> list[str]:
    """A message for each override whose key no job config field or config group has
    (`seqlen=128`: "did you mean seq_len=?"), and each config group value (or model) that
    does not exist (`engine=yafsdb`). Flags and Hydra's own keys are Hydra's."""
    from harness.validate import unknown_field_errors

    values: dict[str, Any] = {}
    groups = _groups()
    errors: list[str] = []
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        raw_key, value = arg.split("=", 1)
        key = raw_key.lstrip("+~").split("@")[0]
        if key in groups or key == "model":
            errors += value_errors(key, value)
        if not key or key.startswith("hydra") or key.split("/")[0] in groups:
            continue
        node = values
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            node.setdefault(leaf, None)
    return errors + unknown_field_errors(values)
