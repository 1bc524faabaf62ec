"""Activation bytes of one layer, measured, not derived from a textbook formula.

One transformer block (plain and checkpointed) and the model's head (final norm, output
projection, the loss) run forward and backward under FakeTensorMode at the job's exact
shape: no memory, no FLOPs, but every tensor the code allocates is seen, fp32 norm upcasts
and rotary intermediates included. A dispatch-level tracker follows the bytes of every
live storage, so each figure is what the allocator would hold.

Keyed by model implementation: `ACTIVATION_PROBES[model_impl]` builds the probed modules
of that implementation: `native` (harness/models/llama.py) or `hf` (the transformers
model a job with model_impl=hf trains).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True, slots=True)
class LayerFootprint:
    """Activation bytes of one block, or of one part of the head, for one micro-batch.

    saved: held from the end of its forward until its backward (its output included: what
        follows saves it). fwd_peak: the most held above its input during forward.
    bwd_peak: the most held during its backward above what was held when it began (its
        saved bytes and the incoming gradient). Weight gradients are computed (so the
        inputs they need are saved) but not counted: each engine holds them in its own
        way (`memory.py`).
    """

    saved: int
    fwd_peak: int
    bwd_peak: int


@dataclass(frozen=True, slots=True)
class ActivationFootprint:
    plain: LayerFootprint  # a block without checkpointing
    checkpointed: LayerFootprint  # a block under non-reentrant checkpointing
    projection: LayerFootprint  # final norm and output projection (saved: logits included)
    loss: LayerFootprint  # fp32 cast of the logits and cross-entropy
    logits: int  # the logits, which the training loop keeps until backward ends
    embedding_out: int  # the embedding's output, the first block's input
    hidden_grad: int  # one gradient of the hidden state, flowing between blocks


class _LiveBytes:
    """Bytes of the storages alive now, and the most since `restart()`."""

    def __init__(self, weight_shapes: set[tuple[int, ...]]) -> None:
        self.live = 0
        self.peak = 0
        self._seen: dict[int, int] = {}
        # Weight gradients: recognised by shape, which no activation shares at the probe's
        # token count (checked by the probe).
        self._weight_shapes = weight_shapes

    def restart(self) -> int:
        self.peak = self.live
        return self.live

    def ignore(self, tensors: Any) -> None:
        """Storages made before tracking (weights, inputs): never counted."""
        for t in tensors:
            self._seen.setdefault(t.untyped_storage()._cdata, 0)

    def track(self, tensor: Any) -> None:
        import torch

        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) in self._weight_shapes:
            return
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self._seen:
            return
        nbytes = storage.nbytes()
        self._seen[key] = nbytes
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.live -= self._seen.pop(key, 0)


def _tracking_mode(counter: _LiveBytes) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Track(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out):
                counter.track(t)
            return out

    return Track()


def _probe(run: Callable[[], Any], counter: _LiveBytes) -> LayerFootprint:
    import torch

    start = counter.restart()
    y = run()
    saved = counter.live - start
    fwd_peak = counter.peak - start
    grad = torch.ones_like(y)
    before = counter.restart()
    y.backward(grad)
    return LayerFootprint(saved=saved, fwd_peak=fwd_peak, bwd_peak=counter.peak - before)


@dataclass
class _Probed:
    """The modules one probe runs, made under FakeTensorMode: a block, the final norm and
    the output projection; `run_block(block, x)` calls a block on hidden states `x` (with
    whatever position inputs it needs, made before tracking and listed in `inputs`)."""

    block: Any
    norm: Any
    output: Any
    run_block: Callable[[Any, Any], Any]
    inputs: list[Any]


def _measure(
    build: Callable[[Any], _Probed], model: str, shape: Any, seq_len: int, micro_batch: int,
    dtype: str,
) -> ActivationFootprint:  # fmt: skip
    """Run `build`'s block (plain and checkpointed) and head forward and backward on fake
    tensors of the job's shape, counting every byte they allocate."""
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        checkpoint_wrapper,
    )

    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    dims = {shape.dim, shape.ffn_dim, shape.vocab_size, shape.n_kv_heads * shape.head_dim}
    if seq_len * micro_batch in dims:
        raise ValueError(f"probe tokens {seq_len * micro_batch} equal a dimension of {model}")
    weight_shapes: set[tuple[int, ...]] = set()
    counter = _LiveBytes(weight_shapes)
    default = torch.get_default_dtype()
    # Fake CPU tensors, not meta ones: attention then takes the fused kernel a real run
    # takes (saving its output and log-sum-exp), where meta would take the math path.
    with FakeTensorMode():
        torch.set_default_dtype(torch_dtype)
        try:
            probed = build(torch_dtype)
        finally:
            torch.set_default_dtype(default)
        modules = (probed.block, probed.norm, probed.output)
        weights = [p for m in modules for p in m.parameters()]
        for w in weights:  # computed (their inputs are saved for them) but never kept
            w.register_post_accumulate_grad_hook(lambda param: setattr(param, "grad", None))
        hidden = (micro_batch, seq_len, shape.dim)
        targets = torch.zeros(micro_batch * seq_len, dtype=torch.long)
        for w in weights:  # and transposed: mm may make a weight's gradient that way
            weight_shapes.update({tuple(w.shape), tuple(reversed(w.shape))})
        for m in modules:
            counter.ignore(m.parameters())
            counter.ignore(m.buffers())
        counter.ignore([*probed.inputs, targets])
        with _tracking_mode(counter):
            x = torch.randn(hidden, dtype=torch_dtype, requires_grad=True)
            embedding_out = counter.live
            plain = _probe(lambda: probed.run_block(probed.block, x), counter)
            ckpt = checkpoint_wrapper(probed.block, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
            checkpointed = _probe(lambda: probed.run_block(ckpt, x), counter)
            projection = _probe(lambda: probed.output(probed.norm(x)), counter)
            logits = torch.randn(
                (micro_batch, seq_len, shape.vocab_size), dtype=torch_dtype, requires_grad=True
            )
            logits_bytes = logits.numel() * logits.element_size()
            loss = _probe(lambda: F.cross_entropy(logits.float().flatten(0, 1), targets), counter)
    return ActivationFootprint(
        plain=plain,
        checkpointed=checkpointed,
        projection=projection,
        loss=loss,
        logits=logits_bytes,
        embedding_out=embedding_out,
        hidden_grad=micro_batch * seq_len * shape.dim * DTYPE_BYTES[dtype],
    )


def _native_footprint(
    model: str, seq_len: int, micro_batch: int, dtype: str
) -> ActivationFootprint:
    import torch

    from harness.models.llama import RMSNorm, TransformerBlock, rope_tables
    from harness.models.shapes import get_shape

    shape = get_shape(model)

    def build(_dtype: Any) -> _Probed:
        rope = rope_tables(shape.head_dim, seq_len, shape.rope_theta, torch.device("cpu"))
        return _Probed(
            block=TransformerBlock(shape),
            norm=RMSNorm(shape.dim, shape.norm_eps),
            output=torch.nn.Linear(shape.dim, shape.vocab_size, bias=False),
            run_block=lambda block, x: block(x, rope),
            inputs=[rope],
        )

    return _measure(build, model, shape, seq_len, micro_batch, dtype)


def _hf_footprint(model: str, seq_len: int, micro_batch: int, dtype: str) -> ActivationFootprint:
    """The Hugging Face model of `model` (a preset as LlamaConfig, or `hf:<config.json>`):
    its own decoder layer, final norm and lm_head, with SDPA attention, as a job builds it."""
    import copy

    import torch

    from harness.models.hf import ATTENTION, config_shape, hf_config, hf_parts

    one_layer = copy.deepcopy(hf_config(model))
    one_layer.num_hidden_layers = 1
    shape = config_shape(model)

    def build(torch_dtype: Any) -> _Probed:
        from transformers import AutoModelForCausalLM

        one_layer.use_cache = False
        fake = AutoModelForCausalLM.from_config(one_layer, attn_implementation=ATTENTION)
        _embed, layers, norm, head = hf_parts(fake)
        rotary = fake.get_submodule("model.rotary_emb")
        positions = torch.arange(seq_len).unsqueeze(0).expand(micro_batch, seq_len)
        probe_x = torch.zeros((micro_batch, seq_len, shape.dim), dtype=torch_dtype)
        cos, sin = rotary(probe_x, positions)

        def run_block(block: Any, x: Any) -> Any:
            out = block(x, position_ids=positions, position_embeddings=(cos, sin))
            return out[0] if isinstance(out, tuple) else out  # transformers 4 returns a tuple

        return _Probed(layers[0], norm, head, run_block, [positions, probe_x, cos, sin])

    return _measure(build, model, shape, seq_len, micro_batch, dtype)


# model_impl -> measure(model, tokens, dtype) for one micro-batch of `tokens` tokens.
ACTIVATION_PROBES: dict[str, Callable[[str, int, str], ActivationFootprint]] = {
    "native": lambda model, tokens, dtype: _native_footprint(model, tokens, 1, dtype),
    "hf": lambda model, tokens, dtype: _hf_footprint(model, tokens, 1, dtype),
}
# Every activation of these models is a multiple of the tokens in the micro-batch (fused
# attention keeps no seq x seq matrix), so one probe at this many tokens, scaled, gives
# every sequence length and micro-batch exactly.
PROBE_TOKENS = 48
_CACHE_VERSION = 4


def activation_footprint(
    model: str, seq_len: int, micro_batch: int, dtype: str, model_impl: str = "native"
) -> ActivationFootprint:
    """The measured footprint of one block and of the head at this shape."""
    per_probe = _probed(model, dtype, model_impl)
    tokens = seq_len * micro_batch
    return _scaled(per_probe, tokens, PROBE_TOKENS)


def _scaled(f: ActivationFootprint, tokens: int, probe_tokens: int) -> ActivationFootprint:
    def n(x: int) -> int:
        return x * tokens // probe_tokens

    def layer(x: LayerFootprint) -> LayerFootprint:
        return LayerFootprint(n(x.saved), n(x.fwd_peak), n(x.bwd_peak))

    return ActivationFootprint(
        plain=layer(f.plain),
        checkpointed=layer(f.checkpointed),
        projection=layer(f.projection),
        loss=layer(f.loss),
        logits=n(f.logits),
        embedding_out=n(f.embedding_out),
        hidden_grad=n(f.hidden_grad),
    )


@functools.lru_cache(maxsize=64)
def _probed(model: str, dtype: str, model_impl: str) -> ActivationFootprint:
    """One probe per (model, dtype, implementation), kept on disk between runs (keyed by
    the torch version and the source of the model and of this probe)."""
    if model_impl not in ACTIVATION_PROBES:
        raise ValueError(
            f"model_impl={model_impl!r} has no activation probe; choose one of: "
            f"{', '.join(ACTIVATION_PROBES)}"
        )
    key = f"{model_impl}/{model}/{dtype}/{PROBE_TOKENS}{_implementation_version(model_impl, model)}"
    path = _cache_path()
    cache = _read_cache(path)
    if key in cache:
        return _from_json(cache[key])
    footprint = ACTIVATION_PROBES[model_impl](model, PROBE_TOKENS, dtype)
    cache[key] = asdict(footprint)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: measure again next time
    return footprint


def _implementation_version(model_impl: str, model: str) -> str:
    """What else a cached hf probe depends on: the transformers release and the config."""
    if model_impl != "hf":
        return ""
    import transformers

    from harness.models.hf import config_path
    from harness.models.shapes import is_hf_config

    config = config_path(model).read_bytes() if is_hf_config(model) else b""
    return f"/transformers {transformers.__version__}/{hashlib.sha256(config).hexdigest()[:12]}"


def _cache_path() -> Path:
    import torch

    from harness.models import llama

    sources = Path(llama.__file__).read_bytes() + Path(__file__).read_bytes()
    digest = hashlib.sha256(sources + torch.__version__.encode()).hexdigest()[:16]
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return root / "yafsdp-bench" / f"activations-v{_CACHE_VERSION}-{digest}.json"


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _from_json(d: dict[str, Any]) -> ActivationFootprint:
    layers = {k: LayerFootprint(**d[k]) for k in ("plain", "checkpointed", "projection", "loss")}
    fields: dict[str, Any] = {**d, **layers}  # the byte counts as they were, layers typed
    return ActivationFootprint(**fields)
