"""One layer of the job's model on fake tensors, and a disk cache for what is probed on it.

The planner learns what a model's code does (the bytes it allocates: `activations.py`; the
kernels it launches: `kernels.py`) by running one decoder layer, the embedding, the final
norm, the output projection and the loss forward and backward under FakeTensorMode: every
tensor and every op of the real code is seen, no memory and no FLOPs are spent.

`PROBES[model_impl]` builds the probed modules of one implementation: `native`
(harness/models/llama.py) or `hf` (the transformers model a job with model_impl=hf trains).

`python -m harness.plan.probe give-way [...]` runs the one-GPU probe of the SM hand-out
rules (`give_way_probe.py`, through `probe/cli.py`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass
class Probed:
    """The modules one probe runs, made under FakeTensorMode: the embedding, a block, the
    final norm and the output projection; `run_block(block, x)` calls a block on hidden
    states `x` (with whatever position inputs it needs, made before tracking and listed in
    `inputs`)."""

    embedding: Any
    block: Any
    norm: Any
    output: Any
    run_block: Callable[[Any, Any], Any]
    inputs: list[Any]


def _native(model: str, seq_len: int, micro_batch: int, torch_dtype: Any) -> Probed:
    import torch

    from harness.models.llama import RMSNorm, TransformerBlock, rope_tables
    from harness.models.shapes import get_shape

    shape = get_shape(model)
    rope = rope_tables(shape.head_dim, seq_len, shape.rope_theta, torch.device("cpu"))
    return Probed(
        embedding=torch.nn.Embedding(shape.vocab_size, shape.dim),
        block=TransformerBlock(shape),
        norm=RMSNorm(shape.dim, shape.norm_eps),
        output=torch.nn.Linear(shape.dim, shape.vocab_size, bias=False),
        run_block=lambda block, x: block(x, rope),
        inputs=[rope],
    )


def _hf(model: str, seq_len: int, micro_batch: int, torch_dtype: Any) -> Probed:
    """The Hugging Face model of `model` (a preset as LlamaConfig, or `hf:<config.json>`):
    its own embedding, decoder layer, final norm and lm_head, with SDPA attention, as a job
    builds it."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    from harness.models.hf import ATTENTION, hf_config, hf_parts

    one_layer = copy.deepcopy(hf_config(model))
    one_layer.num_hidden_layers = 1
    one_layer.use_cache = False
    fake = AutoModelForCausalLM.from_config(one_layer, attn_implementation=ATTENTION)
    embed, layers, norm, head = hf_parts(fake)
    rotary = fake.get_submodule("model.rotary_emb")
    positions = torch.arange(seq_len).unsqueeze(0).expand(micro_batch, seq_len)
    probe_x = torch.zeros((micro_batch, seq_len, one_layer.hidden_size), dtype=torch_dtype)
    cos, sin = rotary(probe_x, positions)

    def run_block(block: Any, x: Any) -> Any:
        out = block(x, position_ids=positions, position_embeddings=(cos, sin))
        return out[0] if isinstance(out, tuple) else out  # transformers 4 returns a tuple

    return Probed(embed, layers[0], norm, head, run_block, [positions, probe_x, cos, sin])


# model_impl -> build(model, seq_len, micro_batch, torch dtype), called under FakeTensorMode
PROBES: dict[str, Callable[[str, int, int, Any], Probed]] = {"native": _native, "hf": _hf}


def build_probed(model: str, model_impl: str, seq_len: int, micro_batch: int, dtype: str) -> Probed:
    """The probed modules, built in `dtype` (call under FakeTensorMode)."""
    import torch

    from harness.dtypes import DTYPES

    if model_impl not in PROBES:
        raise ValueError(
            f"model_impl={model_impl!r} has no probe; choose one of: {', '.join(PROBES)}"
        )
    torch_dtype = DTYPES[dtype]
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype)
    try:
        return PROBES[model_impl](model, seq_len, micro_batch, torch_dtype)
    finally:
        torch.set_default_dtype(default)


def implementation_key(model_impl: str, model: str) -> str:
    """What else a cached hf probe depends on: the transformers release and the config."""
    if model_impl != "hf":
        return ""
    import transformers

    from harness.models.hf import config_path
    from harness.models.shapes import is_hf_config

    config = config_path(model).read_bytes() if is_hf_config(model) else b""
    return f"/transformers {transformers.__version__}/{hashlib.sha256(config).hexdigest()[:12]}"


class DiskCache:
    """A JSON file of probe results under ~/.cache/yafsdp-bench, named by `kind`, a version
    and a digest of the torch release and of the sources the results depend on (the model,
    the probe, and `sources`): a change to any of them starts a new file."""

    def __init__(self, kind: str, version: int, sources: list[str]) -> None:
        self.kind, self.version, self.sources = kind, version, sources

    def path(self) -> Path:
        # The model's source and torch's release, both found without importing torch (a
        # cache hit then costs none).
        model = find_spec("harness.models.llama")
        assert model is not None and model.origin is not None
        files = [model.origin, __file__, *self.sources]
        data = b"".join(Path(f).read_bytes() for f in files) + _torch_release().encode()
        digest = hashlib.sha256(data).hexdigest()[:16]
        root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        return root / "yafsdp-bench" / f"{self.kind}-v{self.version}-{digest}.json"

    def get_or_compute(self, key: str, compute: Callable[[], Any]) -> Any:
        """The cached JSON value of `key`, or `compute()`'s (a JSON-able value), stored."""
        path = self.path()
        cache = _read(path)
        if key in cache:
            return cache[key]
        value = compute()
        cache = _read(path)  # another process may have added keys meanwhile
        cache[key] = value
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(cache))
            tmp.replace(path)
        except OSError:
            pass  # a read-only home: probe again next time
        return value


def _torch_release() -> str:
    """torch's version, from its package metadata (without importing torch) where it has any."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:  # a source tree on the path: ask torch itself
        import torch

        return torch.__version__


def _read(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
