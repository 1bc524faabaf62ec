"""The kernels one step of the job's model launches, from its own code.

The probed modules (`probe.py`: the embedding, one decoder layer, the final norm and
output projection, the loss) run forward and backward under FakeTensorMode while a
dispatch mode records every ATen op. In eager mode each such op is one kernel (views are
none), so the record is the kernel list a real step runs per layer, by kind:
- `gemm`: mm/addmm/bmm/baddbmm with their M, N and K;
- `attention`: the fused scaled-dot-product kernels, forward and backward, with batch,
  heads, head dim and causality (their sequence is the job's);
- `memory`: everything else (casts, norms, rotary, SwiGLU, residual adds, the loss,
  copies), with the bytes it reads and writes.

The census is taken at two token counts. Every GEMM dimension and every byte count of
these models is affine in the tokens of a micro-batch (attention aside, which is priced
from its shape), so two probes give them exactly at any sequence length and micro-batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.plan.probe import DiskCache, build_probed, implementation_key

# Two probe sizes (tokens, a single sequence); neither may equal a dimension of the model.
PROBE_TOKENS = (48, 80)
PHASES = (
    "embedding.forward",
    "embedding.backward",
    "block.forward",
    "block.backward",
    "head.forward",  # final norm and output projection
    "head.backward",
    "loss.forward",  # fp32 cast of the logits and cross-entropy
    "loss.backward",
)
GEMM_OPS = ("aten.mm.", "aten.addmm.", "aten.bmm.", "aten.baddbmm.")
# Ops that launch no kernel: metadata, allocation without a fill.
NO_KERNEL = (
    "prim.",
    "aten._unsafe_view.",
    "aten.detach.",
    "aten.alias.",
    "aten.lift_fresh.",
    "aten.empty.",
    "aten.empty_like.",
    "aten.empty_strided.",
    "aten.new_empty.",
    "aten.new_empty_strided.",
    "aten._reshape_alias.",
    "aten.set_.",
    "aten.resize_.",
    "aten.sym_",
    "aten._local_scalar_dense.",
    "aten.is_same_size.",
)


@dataclass(frozen=True, slots=True)
class Kernel:
    """One kernel of one phase, at the probe sizes: `at(tokens)` gives its figures for a
    micro-batch of that many tokens."""

    op: str
    kind: str  # gemm | attention | memory
    # gemm: (m, n, k) at each probe size; memory: bytes read and written at each size
    probe: tuple[tuple[int, ...], tuple[int, ...]]
    # attention: batch, query heads, key/value heads, head dim, causal, backward
    attention: tuple[int, int, int, int, bool, bool] | None = None

    def at(self, tokens: int) -> tuple[int, ...]:
        """The probe figures, extended affinely to `tokens` tokens."""
        (t0, t1), (a, b) = PROBE_TOKENS, self.probe
        return tuple(x + (y - x) * (tokens - t0) // (t1 - t0) for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class KernelCensus:
    """The kernels of each phase (`PHASES`), in launch order."""

    phases: dict[str, tuple[Kernel, ...]]

    def count(self, phase: str) -> int:
        return len(self.phases[phase])


def _tensors(tree: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size()


def _memory_bytes(name: str, args: Any, kwargs: Any, out: Any) -> int:
    """Bytes an elementwise or reduction kernel reads and writes: every input and output
    once, as a roofline count does, but for ops that touch only part of an input."""
    ins, outs = _tensors((args, kwargs)), _tensors(out)
    written = sum(_nbytes(t) for t in outs)
    if name.startswith(("aten.embedding.", "aten.index_select.", "aten.gather.")):
        return 2 * written + sum(_nbytes(t) for t in ins if not t.is_floating_point())
    if name.startswith("aten.nll_loss_forward."):  # reads one logit per token
        return written + sum(_nbytes(t) for t in ins if not t.is_floating_point()) * 2
    if name.startswith("aten.nll_loss_backward."):  # writes the gradient, reads no input
        return written + sum(_nbytes(t) for t in ins if not t.is_floating_point())
    if name.startswith(("aten.copy_.", "aten._to_copy.", "aten.clone.")):
        return _nbytes(ins[1] if name.startswith("aten.copy_.") else ins[0]) + written
    if name.startswith(("aten.fill_.", "aten.zero_.", "aten.zeros", "aten.ones", "aten.full")):
        return written
    return sum(_nbytes(t) for t in ins) + written


def _record(name: str, func: Any, args: Any, kwargs: Any, out: Any) -> tuple | None:
    """(kind, figures, attention shape) of one op, or None where it launches no kernel."""
    if func.is_view or name.startswith(NO_KERNEL):
        return None
    if name.startswith(GEMM_OPS):
        a, b = _tensors(args)[-2:]  # addmm/baddbmm: (bias, a, b)
        batch = a.shape[0] if a.dim() == 3 else 1
        m, k = a.shape[-2:]
        n = b.shape[-1]
        return "gemm", (batch * m, n, k), None
    if "scaled_dot_product" in name:
        q, k = _tensors(args)[:2] if "backward" not in name else _tensors(args)[1:3]
        causal = bool((kwargs or {}).get("is_causal", False)) or any(
            a is True for a in args if isinstance(a, bool)
        )
        shape = (q.shape[0], q.shape[1], k.shape[1], q.shape[-1], causal, "backward" in name)
        return "attention", (), shape
    return "memory", (_memory_bytes(name, args, kwargs, out),), None


def _census_at(model: str, model_impl: str, tokens: int, dtype: str) -> dict[str, list]:
    """The ops of every phase at one probe size: (op, kind, figures, attention shape)."""
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    from harness.models.shapes import shape_of

    shape = shape_of(model)
    dims = {shape.dim, shape.ffn_dim, shape.vocab_size, shape.n_kv_heads * shape.head_dim}
    if tokens in dims:
        raise ValueError(f"probe tokens {tokens} equal a dimension of {model}")
    phases: dict[str, list] = {p: [] for p in PHASES}
    current: list[list] = [phases[PHASES[0]]]

    class Census(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            out = func(*args, **(kwargs or {}))
            name = str(func)
            found = _record(name, func, args, kwargs, out)
            if found is not None:
                current[0].append([name, *found])
            return out

    def run(phase: str, forward: Callable[[], Any]) -> Any:
        current[0] = phases[f"{phase}.forward"]
        with Census():
            y = forward()
        current[0] = phases[f"{phase}.backward"]
        with Census():
            y.backward(torch.ones_like(y))

    with FakeTensorMode():
        probed = build_probed(model, model_impl, tokens, 1, dtype)
        torch_dtype = probed.block.parameters().__next__().dtype
        ids = torch.zeros((1, tokens), dtype=torch.long)
        x = torch.randn((1, tokens, shape.dim), dtype=torch_dtype, requires_grad=True)
        logits = torch.randn((1, tokens, shape.vocab_size), dtype=torch_dtype, requires_grad=True)
        run("embedding", lambda: probed.embedding(ids))
        run("block", lambda: probed.run_block(probed.block, x))
        run("head", lambda: probed.output(probed.norm(x)))
        run("loss", lambda: F.cross_entropy(logits.float().flatten(0, 1), ids.flatten()))
    return phases


def _merge(small: dict[str, list], large: dict[str, list]) -> dict[str, list]:
    """The two probes' records, op by op; they must list the same ops in the same order."""
    merged: dict[str, list] = {}
    for phase in PHASES:
        a, b = small[phase], large[phase]
        if [r[0] for r in a] != [r[0] for r in b]:
            raise RuntimeError(f"{phase}: the model launches different ops at different lengths")
        merged[phase] = [[ra[0], ra[1], [ra[2], rb[2]], ra[3]] for ra, rb in zip(a, b, strict=True)]
    return merged


_CACHE = DiskCache("kernels", 1, [__file__])


@functools.lru_cache(maxsize=64)
def kernel_census(model: str, dtype: str, model_impl: str = "native") -> KernelCensus:
    """The kernels of each phase of `model`'s step, probed once per (model, dtype,
    implementation) and kept on disk between runs."""
    key = f"{model_impl}/{model}/{dtype}/{PROBE_TOKENS}{implementation_key(model_impl, model)}"
    raw = _CACHE.get_or_compute(
        key,
        lambda: _merge(*(_census_at(model, model_impl, t, dtype) for t in PROBE_TOKENS)),
    )
    phases = {
        phase: tuple(
            Kernel(
                op=op,
                kind=kind,
                probe=(tuple(figures[0]), tuple(figures[1])),
                attention=None if attention is None else tuple(attention),
            )
            for op, kind, figures, attention in records
        )
        for phase, records in raw.items()
    }
    return KernelCensus(phases)
