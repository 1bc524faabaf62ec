"""Which EngineConfig options each adapter reads, in one table (no torch).

`harness.validate` refuses an option set away from its default on an adapter that does not
read it, so that no job silently runs without a setting it asked for (`engine=local
engine.reduce_dtype=bf16` would still reduce in fp32). Adding an option to an adapter
means adding it here; a test holds that every adapter and every option is in the table.
"""

from __future__ import annotations

# EngineConfig.name -> the EngineConfig fields (name and label aside) its adapter reads.
ADAPTER_OPTIONS: dict[str, frozenset[str]] = {
    # the buffer plan's memory budget; the dtype of its reduce-scatter
    "yafsdp": frozenset({"reduce_dtype", "memory_budget_gb"}),
    # MixedPrecision(reduce_dtype=...); the rest is the published setup, fixed
    "fsdp1": frozenset({"reduce_dtype"}),
    # MixedPrecisionPolicy(reduce_dtype=...), explicit prefetch, gradient sync per micro-batch
    "fsdp2": frozenset({"reduce_dtype", "async_unshard", "sync_every_micro_batch"}),
    # the unsharded reference: an fp32 gradient all-reduce, nothing to tune
    "local": frozenset(),
}
