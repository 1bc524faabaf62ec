"""Activation bytes of one layer, measured, not derived from a textbook formula.

One transformer block (plain and checkpointed) and the model's head (final norm, output
projection, the loss) run forward and backward under FakeTensorMode at the job's exact
shape: no memory, no FLOPs, but every tensor the code allocates is seen, fp32 norm upcasts
and rotary intermediates included. A dispatch-level tracker follows the bytes of every
live storage, so each figure is what the allocator would hold.

The probed modules are those of the job's model implementation (`probe.py`): `native`
(harness/models/llama.py) or `hf` (the transformers model a job with model_impl=hf trains).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from harness.models.shapes import shape_of
from harness.models.unit_names import EMBEDDING, OUTPUT
from harness.models.unit_names import layer as layer_name
from harness.plan.probe import DTYPE_BYTES, DiskCache, build_probed, implementation_key


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


def _measure(
    model: str, model_impl: str, seq_len: int, micro_batch: int, dtype: str
) -> ActivationFootprint:
    """Run the probed block (plain and checkpointed) and head forward and backward on fake
    tensors of the job's shape, counting every byte they allocate."""
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        checkpoint_wrapper,
    )

    from harness.dtypes import DTYPES

    shape = shape_of(model)
    torch_dtype = DTYPES[dtype]
    dims = {shape.dim, shape.ffn_dim, shape.vocab_size, shape.n_kv_heads * shape.head_dim}
    if seq_len * micro_batch in dims:
        raise ValueError(f"probe tokens {seq_len * micro_batch} equal a dimension of {model}")
    weight_shapes: set[tuple[int, ...]] = set()
    counter = _LiveBytes(weight_shapes)
    # Fake CPU tensors, not meta ones: attention then takes the fused kernel a real run
    # takes (saving its output and log-sum-exp), where meta would take the math path.
    with FakeTensorMode():
        probed = build_probed(model, model_impl, seq_len, micro_batch, dtype)
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


# Every activation of these models is a multiple of the tokens in the micro-batch (fused
# attention keeps no seq x seq matrix), so one probe at this many tokens, scaled, gives
# every sequence length and micro-batch exactly.
PROBE_TOKENS = 48
_CACHE = DiskCache("activations", 5, [__file__])


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
    key = f"{model_impl}/{model}/{dtype}/{PROBE_TOKENS}{implementation_key(model_impl, model)}"
    value = _CACHE.get_or_compute(
        key, lambda: asdict(_measure(model, model_impl, PROBE_TOKENS, 1, dtype))
    )
    return _from_json(value)


def _from_json(d: dict[str, Any]) -> ActivationFootprint:
    layers = {k: LayerFootprint(**d[k]) for k in ("plain", "checkpointed", "projection", "loss")}
    fields: dict[str, Any] = {**d, **layers}  # the byte counts as they were, layers typed
    return ActivationFootprint(**fields)


def activation_moments(
    acts: ActivationFootprint, n_layers: int, ckpt_layers: int
) -> dict[str, dict[str, int]]:
    """Activation bytes by class at each moment of forward and backward, named by the
    unit it falls in ('forward: layers.3', 'backward: tok_embeddings reduce'; the output
    unit's moments by its part: 'forward: projection', 'forward: loss')."""

    def held(upto: int) -> dict[str, int]:
        """Saved by blocks [0, upto) plus the embedding's output."""
        ckpt = min(upto, ckpt_layers)
        return {
            "activations_checkpointed": acts.embedding_out + ckpt * acts.checkpointed.saved,
            "activations_plain": (upto - ckpt) * acts.plain.saved,
        }

    def block(k: int) -> LayerFootprint:
        return acts.checkpointed if k < ckpt_layers else acts.plain

    def cls(k: int) -> str:
        return "activations_checkpointed" if k < ckpt_layers else "activations_plain"

    proj, loss = acts.projection, acts.loss
    moments: dict[str, dict[str, int]] = {}
    for k in range(n_layers):
        moments[f"forward: {layer_name(k)}"] = merge_bytes(held(k), {cls(k): block(k).fwd_peak})
    every = held(n_layers)
    moments["forward: projection"] = merge_bytes(every, {"logits_loss": proj.fwd_peak})
    moments["forward: loss"] = merge_bytes(every, {"logits_loss": proj.saved + loss.fwd_peak})
    moments["backward: loss"] = merge_bytes(
        every, {"logits_loss": proj.saved + loss.saved + loss.bwd_peak}
    )
    # the gradient of the logits (their size) comes in; the logits stay referenced
    moments["backward: projection"] = merge_bytes(
        every, {"logits_loss": proj.saved + acts.logits + proj.bwd_peak}
    )
    moments[f"backward: {OUTPUT} reduce"] = merge_bytes(
        every, {"logits_loss": acts.logits, cls(n_layers - 1): acts.hidden_grad}
    )
    for k in reversed(range(n_layers)):
        moments[f"backward: {layer_name(k)}"] = merge_bytes(
            held(k + 1),
            {cls(k): acts.hidden_grad + block(k).bwd_peak, "logits_loss": acts.logits},
        )
        # After the block's backward its saved activations are gone; what an engine does
        # with its gradients next (FSDP's reduce-scatter) happens here.
        moments[f"backward: {layer_name(k)} reduce"] = merge_bytes(
            held(k), {cls(k): acts.hidden_grad, "logits_loss": acts.logits}
        )
    moments[f"backward: {EMBEDDING}"] = {
        "activations_checkpointed": acts.embedding_out + acts.hidden_grad,
        "logits_loss": acts.logits,
    }
    moments[f"backward: {EMBEDDING} reduce"] = {"logits_loss": acts.logits}
    return moments


def merge_bytes(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    """Bytes by class of `a` and `b` held together."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out
