"""Which EngineConfig options each adapter reads, in one table (no torch).

`harness.validate` refuses an option set away from its default on an adapter that does not
read it, so that no job silently runs without a setting it asked for (`engine=local
engine.reduce_dtype=bf16` would still reduce in fp32). Adding an option to an adapter
means adding it here; a test holds that every adapter and every option is in the table.
"""

from __future__ import annotations

# EngineConfig.name -> the EngineConfig fields (name and label aside) its adapter reads.
# Every adapter's blocks can be compiled: the session compiles them before any adapter
# shards the model (harness.engines.compile_blocks).
_COMPILE = frozenset({"compile_blocks"})
ADAPTER_OPTIONS: dict[str, frozenset[str]] = {
    # the buffer plan, its memory budget; the dtype of its reduce-scatter
    "yafsdp": _COMPILE | {"reduce_dtype", "memory_budget_gb", "buffer_plan"},
    # MixedPrecision(reduce_dtype=...); the rest is the published setup, fixed
    "fsdp1": _COMPILE | {"reduce_dtype"},
    # MixedPrecisionPolicy(reduce_dtype=...), explicit prefetch, gradient sync per micro-batch
    "fsdp2": _COMPILE | {"reduce_dtype", "async_unshard", "sync_every_micro_batch"},
    # the unsharded reference: an fp32 gradient all-reduce, nothing to tune
    "local": _COMPILE,
    # ZeRO-3's communication_data_type and grad_accum_dtype
    "deepspeed": _COMPILE | {"reduce_dtype"},
    # the upstream library's MixedPrecisionPolicy(reduce_dtype=...)
    "ya_fsdp": _COMPILE | {"reduce_dtype"},
}
