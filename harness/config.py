"""Typed configuration of one job. Hydra composes `sweeps/` into these dataclasses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from harness.models.presets import config_fingerprint
from harness.models.shapes import is_hf_config

DTYPES = ("bf16", "fp16", "fp32")
DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "nccl", "gloo")
# torch.optim.AdamW's implementations; every engine steps with the same one.
ADAMW_IMPLS = ("fused", "foreach", "for-loop")
# native: harness.models.llama; hf: the transformers causal LM of the same config.
MODEL_IMPLS = ("native", "hf")
# model_impl's default, resolved when the config is built: hf for an `hf:<path>` model (only
# transformers can build it), native for a preset. A job's recorded config never holds it.
MODEL_IMPL_AUTO = "auto"
# yafsdp's buffer plans (`yafsdp_impl._plan.PLANS`; a test holds the two equal).
BUFFER_PLANS = (
    "auto",
    "min_bytes",
    "alternating",
    "lean_alternating",
    "ends_shared",
    "separate_ends",
    "half_staging",
    "split_vocab",
)
# The plans a job holds as named: every plan but `auto` (chosen for the budget) and
# `min_bytes` (the smallest of three).
NAMED_BUFFER_PLANS = BUFFER_PLANS[2:]


@dataclass(kw_only=True)
class EngineConfig:
    """Which sharding engine wraps the model, and its knobs.

    `name` picks the adapter; `label` is how tables name this variant (for example the
    tuned FSDP2 is name=fsdp2, label=fsdp2_tuned, async_unshard=true).
    """

    name: str = "local"
    label: str = "local"
    reduce_dtype: str = "fp32"
    async_unshard: bool = False  # fsdp2 only: asynchronous unshard plus explicit prefetch
    # Reduce gradients after every micro-batch, as the published engines did. fsdp2 alone
    # can instead keep unsharded gradients and reduce once, after the last micro-batch.
    sync_every_micro_batch: bool = True
    # yafsdp only: the memory its own tensors may take, in GiB, for its buffer plan; 0: the
    # device's memory less what the planner predicts the rest of the step holds.
    memory_budget_gb: float = 0.0
    # yafsdp only: its buffer plan (`YaFSDP(buffer_plan=...)`, one of BUFFER_PLANS): "auto"
    # chooses for the memory budget; a named plan is held whatever the budget.
    buffer_plan: str = "auto"
    # Compile each transformer block (after checkpoint wrapping, before sharding), as
    # torchtitan does; `harness.engines.compile_blocks`.
    compile_blocks: bool = False


@dataclass(kw_only=True)
class ProfileConfig:
    steps: int = 2  # profiled steps after the timed ones; 0 turns profiling off
    warmup: int = 1
    # CUDA only: record the CUDA synchronisation events (stream waits on events, stream and
    # device syncs), the edges `python -m harness.trace path` needs. On by default; its
    # overhead on a step is measured by the GPU check, not yet here (no GPU).
    cuda_sync_events: bool = True


@dataclass(kw_only=True)
class NetworkSpec:
    """NCCL's ring over one cluster's links, as `harness.plan.time.network` prices it: NVLink
    inside a node, one ring channel per NIC across nodes, and NCCL's own latency tables
    (ring algorithm; three entries each: LL, LL128, Simple). 0 means unknown."""

    nvlink_channels: int = 0  # ring channels inside a node
    nvlink_channel_gbps: float = 0.0  # GB/s each
    nics_per_node: int = 0
    nic_gbps: float = 0.0  # line rate of one NIC, Gb/s
    nic_efficiency: float = 0.0  # fraction of the line rate NCCL achieves per NIC
    node_decline_per_doubling: float = 0.0  # bus bandwidth lost per doubling of nodes
    decline_from_nodes: int = 1  # ... past this many nodes
    base_latency_us: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    nvlink_step_us: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    net_step_us: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    net_overhead_us: float = 0.0  # per intra-node step once a ring crosses nodes
    ll_max_gbps: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    ll128_channel_gbps: float = 0.0
    # Measured bus bandwidth of a large all-gather and reduce-scatter (nccl-tests' busbw:
    # latency included) on `bus_measured_nodes` nodes; 0: derived from the NICs. Other node
    # counts follow `node_decline_per_doubling`, capped by the NICs' line rate.
    all_gather_bus_gbps: float = 0.0
    reduce_scatter_bus_gbps: float = 0.0
    bus_measured_nodes: int = 0

    def known(self) -> bool:
        return bool(self.nvlink_channels and self.nvlink_channel_gbps)


@dataclass(kw_only=True)
class DeviceSpec:
    """What the planner (`harness.plan`) needs to know of one device and its network.

    Each profile in `sweeps/hardware/` fills it and names the public source of every
    figure in `sources` (field -> source); 0 means unknown (the planner then predicts
    memory only). A calibration (`python -m harness.bandwidth`) replaces the network's.
    """

    name: str = "unknown"
    peak_tflops: float = 0.0  # dense tensor-core TFLOP/s in the job's dtype (bf16)
    memory_gbps: float = 0.0  # device memory bandwidth, GB/s
    sm_count: int = 0
    # GEMMs: the best fraction of peak a large bf16 GEMM reaches (cuBLAS), and the output
    # tile each SM computes (M x N), from which wave quantization follows
    gemm_efficiency: float = 0.0
    gemm_tile: list[int] = field(default_factory=lambda: [0, 0])
    # fused causal attention (FlashAttention-2 / SDPA): forward+backward TFLOP/s achieved
    # at head dim 128, by sequence length (the two lists pair up)
    attention_seq: list[int] = field(default_factory=list)
    attention_tflops: list[float] = field(default_factory=list)
    memory_efficiency: float = 0.0  # fraction of memory bandwidth elementwise kernels reach
    kernel_floor_us: float = 0.0  # the shortest a kernel takes, however little it does
    launch_us: float = 0.0  # host time to launch one eager op's kernel
    hook_us: float = 0.0  # host time of one engine hook (Python, per unit and pass)
    nccl_sms: int = 0  # SMs NCCL's kernels hold while a collective runs
    # GiB a process holds on the device beside the caching allocator, all step: the CUDA
    # context, NCCL's buffers, cuBLAS workspaces (a calibration's measurement replaces it)
    outside_allocator_gb: float = 0.0
    network: NetworkSpec = field(default_factory=NetworkSpec)
    sources: dict[str, str] = field(default_factory=dict)

    def knows_time(self) -> bool:
        return bool(self.peak_tflops and self.memory_gbps and self.gemm_efficiency)


@dataclass(kw_only=True)
class FaultConfig:
    """A deliberate failure for testing: kind none|crash|hang|oom|kill on `rank` at `step`;
    or kind delay: `rank` sleeps `ms` inside engine range `where`, once a step from `step` on
    (`harness.rank.faults`)."""

    kind: str = "none"
    rank: int = 0
    step: int = 1
    where: str = ""
    ms: float = 0.0


FAULT_KINDS = ("none", "crash", "hang", "oom", "kill", "delay")


# How long a JobConfig field's value lives, marked once on the field (its `metadata`); a field
# without a mark is MEASURED. Only MEASURED fields can change a job's measurements: resume
# ignores the others when it compares a stored config with a requested one, the report never
# tells jobs apart by them, and a sweep's job directory is not named by them (`exclude_keys`
# in sweeps/config.yaml, held to this by a test).
LIFETIME = "lifetime"
MEASURED = "measured"  # what is measured: model, engine, shape, dtype, steps, ...
RUNNER = "runner"  # how the runner behaves: console, dry run, rerun, failures, timeouts
SWEEP = "sweep"  # what the sweep asks for: how many runs of each job
PLANNER = "planner"  # the planner's hardware: changes a prediction, never a measurement
LIFETIMES = (MEASURED, RUNNER, SWEEP, PLANNER)


def _lives(lifetime: str) -> Mapping[str, str]:
    return MappingProxyType({LIFETIME: lifetime})


@dataclass(kw_only=True)
class JobConfig:
    model: str = "llama_tiny"  # a preset (harness.models.shapes), or hf:<path to config.json>
    model_impl: str = MODEL_IMPL_AUTO  # one of MODEL_IMPLS; an hf: model implies hf
    # An hf: model's config.json as a SHA-256 of its bytes, read when the config is built
    # and again when the job runs: the path alone would let an edited file pass for the
    # model measured before ("" for a preset). Resume compares it like any other field.
    model_config_sha256: str = ""
    engine: EngineConfig = field(default_factory=EngineConfig)
    gpus: int = 2  # world size: GPUs, or ranks on CPU
    seq_len: int = 128
    ckpt_layers: int = 0  # the first N transformer layers use activation checkpointing
    micro_batch: int = 1  # sequences per rank per micro-batch
    grad_accum: int = 1
    dtype: str = "bf16"  # parameter/compute dtype; master weights and reduction stay fp32
    warmup_steps: int = 2
    steps: int = 5
    seed: int = 0
    # Run each job this many times at its grid point, each run its own job directory and
    # result row; a sweep alternates the engines within a point (A B A B ...), see
    # harness.sweep.order. `repeat` is which run this job is (0-based), set by the sweep.
    repeats: int = field(default=1, metadata=_lives(SWEEP))
    repeat: int = 0
    lr: float = 3e-4
    adamw_impl: str = "fused"  # one of ADAMW_IMPLS, the same for every engine
    clip_grad_norm: float = 1.0  # max global gradient L2 norm, inside the timed step; 0: off
    device: str = "auto"  # auto: cuda when present, else cpu with gloo
    backend: str = "auto"  # auto: nccl on CUDA, gloo on CPU; gloo is also allowed on CUDA
    threads_per_rank: int = 0  # 0: cores / ranks on CPU
    gpus_per_node: int = 8
    device_memory_gb: float = 0.0  # memory of one device for the fit check; 0: detect locally
    collective_timeout_s: float = field(default=300.0, metadata=_lives(RUNNER))
    # wall-clock limit of the whole job
    job_timeout_s: float = field(default=3600.0, metadata=_lives(RUNNER))
    memory_limit_gb: float = 0.0  # 0: no cap; else a job over it ends as oom
    # measure all-gather/reduce-scatter bus bandwidth at the job's unit sizes at its start
    probe_bandwidth: bool = False
    device_spec: DeviceSpec = field(default_factory=DeviceSpec, metadata=_lives(PLANNER))
    # The planner's only: the torch version whose engine code and stream priorities a plan
    # models ("": the installed torch's). A job always runs the installed torch.
    torch_version: str = field(default="", metadata=_lives(PLANNER))
    # The planner's only: programs of published code planned beside each point's engines,
    # never run (comma-separated; `ya_fsdp_v1`: upstream YaFSDP v1 as its README's runs ran it).
    plan_engines: str = field(default="", metadata=_lives(PLANNER))
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    fault: FaultConfig = field(default_factory=FaultConfig)
    # a multirun with a job that is not ok exits 1; true (for drills) lets it exit 0
    allow_failures: bool = field(default=False, metadata=_lives(RUNNER))
    # re-measure a job whose ok result would stand (the old one kept as result.previous.<n>.json)
    rerun: bool = field(default=False, metadata=_lives(RUNNER))
    # CUDA only: record the allocator's history in the profiled pass and dump its snapshot
    # (<job dir>/memory_snapshot/rank<r>.pickle, for pytorch.org/memory_viz)
    memory_snapshot: bool = False
    # console: only the end-of-sweep summary
    quiet: bool = field(default=False, metadata=_lives(RUNNER))
    # console: rank 0's output live, and Hydra's own lines
    verbose: bool = field(default=False, metadata=_lives(RUNNER))
    # validate and print the job, start nothing
    dry_run: bool = field(default=False, metadata=_lives(RUNNER))

    def __post_init__(self) -> None:
        if self.model_impl == MODEL_IMPL_AUTO:
            self.model_impl = "hf" if is_hf_config(self.model) else "native"
        if not self.model_config_sha256:
            self.model_config_sha256 = config_fingerprint(self.model)


def lifetime_of(name: str) -> str:
    """The lifetime of JobConfig's field `name` (a dotted name counts by its first part)."""
    top = name.split(".")[0]
    for f in fields(JobConfig):
        if f.name == top:
            return str(f.metadata.get(LIFETIME, MEASURED))
    raise KeyError(f"{top!r} is no field of harness.config.JobConfig")


def fields_living(*lifetimes: str) -> frozenset[str]:
    """JobConfig's top-level fields of the given lifetimes."""
    unknown = set(lifetimes) - set(LIFETIMES)
    if unknown:
        raise ValueError(f"unknown lifetime(s) {sorted(unknown)}; one of {LIFETIMES}")
    return frozenset(f.name for f in fields(JobConfig) if lifetime_of(f.name) in lifetimes)


def config_from_dict(data: dict[str, Any]) -> JobConfig:
    """Rebuild a JobConfig from its `asdict` form (as stored in result.json).

    Keys this version does not know (a field since removed) are dropped; missing ones
    take today's defaults.
    """

    def known(cls: type, values: dict[str, Any]) -> dict[str, Any]:
        names = {f.name for f in fields(cls)}
        return {k: v for k, v in values.items() if k in names}

    data = known(JobConfig, data)
    data["engine"] = EngineConfig(**known(EngineConfig, data.get("engine", {})))
    data["profile"] = ProfileConfig(**known(ProfileConfig, data.get("profile", {})))
    data["fault"] = FaultConfig(**known(FaultConfig, data.get("fault", {})))
    spec = known(DeviceSpec, data.get("device_spec", {}))
    spec["network"] = NetworkSpec(**known(NetworkSpec, spec.get("network") or {}))
    data["device_spec"] = DeviceSpec(**spec)
    return JobConfig(**data)
