"""How a job's ranks are laid out on nodes: one rank per GPU, a job on one node takes
exactly its GPU count there, a larger one fills whole nodes.

The one home of this rule: pre-flight validation and the SLURM request both ask it.
"""

from __future__ import annotations


def node_split_error(gpus: int, gpus_per_node: int) -> str | None:
    """Why `gpus` ranks cannot be laid out on nodes of `gpus_per_node`, or None if they can."""
    if gpus <= gpus_per_node or gpus % gpus_per_node == 0:
        return None
    lower = gpus // gpus_per_node * gpus_per_node
    upper = lower + gpus_per_node
    return (
        f"gpus={gpus} does not split into whole nodes of gpus_per_node={gpus_per_node}: "
        f"use gpus={lower} or gpus={upper} (a multiple of gpus_per_node), at most "
        f"gpus={gpus_per_node} for one node, or set gpus_per_node to a divisor of {gpus}"
    )
