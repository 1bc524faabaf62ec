"""The names of the causes a step's wall time is split into, in one place.

The attribution (`harness.trace.diagnose.attribute`), the comparison of two jobs and the report all
use these names, so a reader sees the same row under the same name everywhere. Every name
is a plain string (a JSON key). No torch.

The exclusive sweep gives every microsecond of a step to exactly one cause, taking the
first that applies in `ORDER` (device or main thread busy with model compute first, then
the engine's own work, ..., then the idle time, split by what ended it).
"""

from __future__ import annotations

from typing import Final

# The device (GPU) or the main thread (CPU) busy with the model's own work
COMPUTE_GEMM_ATTENTION: Final = "compute.gemm_attention"
COMPUTE_OTHER: Final = "compute.other"
# work launched inside the engine's own profiler ranges, other than the collectives
ENGINE: Final = "engine"
OPTIMIZER: Final = "optimizer"
# a collective running with nothing else busy (the exposed communication), by kind
COMM_ALL_GATHER: Final = "comm.all_gather"
COMM_REDUCE_SCATTER: Final = "comm.reduce_scatter"
COMM_ALL_REDUCE: Final = "comm.all_reduce"
COMM_OTHER: Final = "comm.other"
# the part of an exposed collective beyond what its bytes need at the yardstick bandwidth
COMM_SLOW: Final = "comm.slow"
MEMCPY: Final = "memcpy"
# idle time, before the launch of the event that ended it: the host had not issued it yet
HOST_SYNC: Final = "host.sync"  # a device synchronisation call
HOST_ALLOCATOR: Final = "host.allocator"  # an allocator call (cudaMalloc/cudaFree, ...)
HOST_OTHER: Final = "host.other"  # other CPU work, or none traced
# idle time after that launch: the work was queued but waited (on another stream, an event)
QUEUED: Final = "queued"
UNATTRIBUTED: Final = "unattributed"

COLLECTIVE_KINDS: Final = ("all_gather", "reduce_scatter", "all_reduce")
_COMM_BY_KIND: Final = {
    "all_gather": COMM_ALL_GATHER,
    "reduce_scatter": COMM_REDUCE_SCATTER,
    "all_reduce": COMM_ALL_REDUCE,
}

COMPUTE: Final = (COMPUTE_GEMM_ATTENTION, COMPUTE_OTHER)
EXPOSED_COMM: Final = (COMM_ALL_GATHER, COMM_REDUCE_SCATTER, COMM_ALL_REDUCE, COMM_OTHER, COMM_SLOW)
HOST_WAIT: Final = (HOST_SYNC, HOST_ALLOCATOR, HOST_OTHER)
IDLE: Final = (*HOST_WAIT, QUEUED)

# every cause, in the sweep's priority order (also the order tables print them in)
ORDER: Final = (*COMPUTE, ENGINE, OPTIMIZER, *EXPOSED_COMM, MEMCPY, *IDLE, UNATTRIBUTED)

DESCRIPTIONS: Final = {
    COMPUTE_GEMM_ATTENTION: "model compute: GEMM and attention",
    COMPUTE_OTHER: "model compute: other (elementwise, norms, ...)",
    ENGINE: "engine's own work (copies, casts, divides, zeroing)",
    OPTIMIZER: "optimizer step",
    COMM_ALL_GATHER: "exposed all-gather",
    COMM_REDUCE_SCATTER: "exposed reduce-scatter",
    COMM_ALL_REDUCE: "exposed all-reduce",
    COMM_OTHER: "exposed other collectives",
    COMM_SLOW: "exposed collective time beyond what its bytes need",
    MEMCPY: "exposed memory copies",
    HOST_SYNC: "idle: host in a device synchronisation",
    HOST_ALLOCATOR: "idle: host in an allocator call",
    HOST_OTHER: "idle: host busy elsewhere, work not yet issued",
    QUEUED: "idle: work issued but waiting",
    UNATTRIBUTED: "not attributed",
}


def exposed_comm(kind: str) -> str:
    """The cause of an exposed collective of `kind` ('all_gather', ...; others -> other)."""
    return _COMM_BY_KIND.get(kind, COMM_OTHER)
