"""Each engine's streams and their priorities, at the torch version the plan names.

A lower number is a higher priority; the compute (default) stream is 0. Read from each
engine's code:
- FSDP1: `_runtime_utils._init_streams` creates the unshard, post-backward and pre-unshard
  streams at priority 0 for FULL_SHARD (-1 only with hybrid sharding and
  `limit_all_gathers`; PR #106133), the same from torch 2.1 to 2.13. So its gradient cast
  and pre-divide (the post-backward stream) run at the compute stream's priority.
- FSDP2: `_fsdp_param_group.FSDPCommContext.lazy_init` creates its all-gather copy-in,
  all-gather and reduce-scatter streams at -1 ("can help avoid some issues where their
  copies in/out are delayed and block computation").
- upstream YaFSDP v1 as published (`ya_fsdp/ya_fsdp.py` at 0bd33e7, line 68): one
  communication stream at -1, on which its bf16->fp32 gradient copy runs too.
- yafsdp (this project's, `yafsdp_impl/events.py` `Streams`): one communication stream at -1;
  its gradient and staging copies run on the compute stream.
- Where the collective's kernels run: up to torch 2.7, on ProcessGroupNCCL's own stream,
  priority 0 unless `TORCH_NCCL_HIGH_PRIORITY=1` (`ProcessGroupNCCL.cpp`); from 2.8
  (PR #150398) a synchronous collective runs on the caller's current stream and takes its
  priority. Every engine here issues its collectives synchronously from its side stream.
"""

from __future__ import annotations

from harness.plan.time.simulate import COMM, COMPUTE, SIDE, UNSHARD
from harness.validate.torch_version import parse_version

# From this version a synchronous collective runs on the caller's current stream.
COLLECTIVE_ON_CALLER_STREAM = (2, 8)
# The engine's own streams (the side stream, and the stream it issues collectives from).
ENGINE_STREAM_PRIORITY = {"fsdp1": 0, "fsdp2": -1, "fsdp2_tuned": -1, "yafsdp": -1, "local": 0,
                          "ya_fsdp_v1": -1}  # fmt: skip


def installed_torch_version() -> str:
    """The installed torch's version, read from its metadata (no import of torch)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "2.13"


def resolve_torch_version(field: str) -> str:
    """The plan's torch version: the job's `torch_version`, else the installed one."""
    text = field or installed_torch_version()
    parse_version(text)
    return text


def stream_priorities(engine: str, torch_version: str) -> dict[str, int]:
    """Priority of the compute, side and communication streams for `engine` at
    `torch_version` (the communication stream: where its collectives' kernels run)."""
    own = ENGINE_STREAM_PRIORITY.get(engine, 0)
    on_caller = parse_version(torch_version) >= COLLECTIVE_ON_CALLER_STREAM
    return {COMPUTE: 0, SIDE: own, UNSHARD: own, COMM: own if on_caller else 0}
