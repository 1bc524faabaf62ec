"""Public measured FSDP runs on A100/H100 clusters, and the planner's predictions of them.

`python -m harness.plan.public_runs` prints the table (predicted and measured iteration
time, the error, the source); `tests/plan/test_plan_public.py` holds the planner to it.
No constant of the planner was fitted to these rows: every figure in the hardware profiles
names its own public source, none of them these runs.

A row is used when its setting maps onto what the planner models: pure FSDP (no tensor,
pipeline or context parallelism, no HSDP), a Llama shape the harness knows, bf16 without
float8 or torch.compile, and checkpointing of none or every block. Rows left out, and
why, are listed in `LEFT_OUT`.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PublicRun:
    name: str
    source: str  # repository, path and commit, or URL
    quote: str  # the measured figure as the source prints it
    setting: str  # model, GPUs, sequence, batch, checkpointing, hardware, as the source says
    overrides: tuple[str, ...]  # the same setting as `harness.plan` fields
    tokens_per_s_per_gpu: float
    tokens_per_step: int  # per GPU: micro-batch x sequence length
    assumed: str = ""  # what the source does not say, and what the planner assumes

    @property
    def measured_s(self) -> float:
        return self.tokens_per_step / self.tokens_per_s_per_gpu


_TORCHTITAN = "pytorch/torchtitan docs/performance.md"
_TORCHTITAN_NET = ("network not stated (the repository's SLURM script targets AWS EFA); "
                   "the profile's DGX fabric is used")  # fmt: skip
_FMS = "foundation-model-stack/fms-fsdp README.md @5e522b4 (2024-03-13) and the PyTorch blog "
_FMS += "'Maximizing training throughput using PyTorch FSDP' (2024-03-13)"
_FMS_DIFF = ("FSDP1 wraps the blocks only (the root holds embedding, norm and head); "
             "forward_prefetch not stated; nodes taken as 8 GPUs with the stated "
             "interconnect per node")  # fmt: skip

RUNS: tuple[PublicRun, ...] = (
    PublicRun(
        name="torchtitan Llama 2 13B",
        source=f"{_TORCHTITAN} @395a526 (2024-04-18)",
        quote="| 13B | 2 | no | 2162 | 61.1% |",
        setting="FSDP2 only, 64 A100-80GB, local batch 2, seq 4096, no AC, bf16/fp32 reduce, "
        "no compile",
        overrides=(
            "hardware=a100_80gb",
            "model=llama2_13b",
            "engine=fsdp2",
            "gpus=64",
            "micro_batch=2",
            "seq_len=4096",
            "ckpt_layers=0",
        ),  # fmt: skip
        tokens_per_s_per_gpu=2162,
        tokens_per_step=2 * 4096,
        assumed=_TORCHTITAN_NET,
    ),
    PublicRun(
        name="torchtitan Llama 2 70B",
        source=f"{_TORCHTITAN} @395a526 (2024-04-18)",
        quote="| 70B | 2 | full | 353 | 50.5% |",
        setting="FSDP2 only, 64 A100-80GB, local batch 2, seq 4096, full AC, bf16/fp32 "
        "reduce, no compile",
        overrides=(
            "hardware=a100_80gb",
            "model=llama2_70b",
            "engine=fsdp2",
            "gpus=64",
            "micro_batch=2",
            "seq_len=4096",
            "ckpt_layers=80",
        ),  # fmt: skip
        tokens_per_s_per_gpu=353,
        tokens_per_step=2 * 4096,
        assumed=_TORCHTITAN_NET,
    ),
    PublicRun(
        name="torchtitan Llama 3 70B",
        source=f"{_TORCHTITAN} @1ea476e (2024-04-24)",
        quote="| 70B | 1 | full | 331 | 51.7% |",
        setting="FSDP2 only, 64 A100-80GB, local batch 1, seq 8192, full AC, bf16/fp32 "
        "reduce, no compile",
        overrides=(
            "hardware=a100_80gb",
            "model=llama3_70b",
            "engine=fsdp2",
            "gpus=64",
            "micro_batch=1",
            "seq_len=8192",
            "ckpt_layers=80",
        ),  # fmt: skip
        tokens_per_s_per_gpu=331,
        tokens_per_step=8192,
        assumed=_TORCHTITAN_NET,
    ),
    PublicRun(
        name="fms-fsdp Llama 2 34B, A100",
        source=_FMS,
        quote="| 34b | FSDP | Full AC | 2 | 700 | 1550 |",
        setting="FSDP1 FULL_SHARD, 128 A100-80GB, 400 Gbps inter-node, local batch 2, seq "
        "4096, full AC, bf16 reduce, no compile",
        overrides=(
            "hardware=a100_80gb",
            "model=llama2_34b",
            "engine=fsdp1",
            "gpus=128",
            "micro_batch=2",
            "seq_len=4096",
            "ckpt_layers=48",
            "engine.reduce_dtype=bf16",
            "device_spec.network.nics_per_node=4",
            "device_spec.network.nic_gbps=100",
        ),  # fmt: skip
        tokens_per_s_per_gpu=700,
        tokens_per_step=2 * 4096,
        assumed=_FMS_DIFF,
    ),
    PublicRun(
        name="fms-fsdp Llama 2 70B, A100",
        source=_FMS,
        quote="| 70b | FSDP | Full AC | 2 | 370 | 800 |",
        setting="FSDP1 FULL_SHARD, 128 A100-80GB, 400 Gbps inter-node, local batch 2, seq "
        "4096, full AC, bf16 reduce, no compile",
        overrides=(
            "hardware=a100_80gb",
            "model=llama2_70b",
            "engine=fsdp1",
            "gpus=128",
            "micro_batch=2",
            "seq_len=4096",
            "ckpt_layers=80",
            "engine.reduce_dtype=bf16",
            "device_spec.network.nics_per_node=4",
            "device_spec.network.nic_gbps=100",
        ),  # fmt: skip
        tokens_per_s_per_gpu=370,
        tokens_per_step=2 * 4096,
        assumed=_FMS_DIFF,
    ),
    PublicRun(
        name="fms-fsdp Llama 2 34B, H100",
        source=_FMS,
        quote="| 34b | FSDP | Full AC | 2 | 700 | 1550 |",
        setting="FSDP1 FULL_SHARD, 96 H100-80GB, 800 Gbps inter-node, local batch 2, seq "
        "4096, full AC, bf16 reduce, no compile",
        overrides=(
            "hardware=h100_80gb",
            "model=llama2_34b",
            "engine=fsdp1",
            "gpus=96",
            "micro_batch=2",
            "seq_len=4096",
            "ckpt_layers=48",
            "engine.reduce_dtype=bf16",
            "device_spec.network.nics_per_node=8",
            "device_spec.network.nic_gbps=100",
        ),  # fmt: skip
        tokens_per_s_per_gpu=1550,
        tokens_per_step=2 * 4096,
        assumed=_FMS_DIFF + "; the torch.compile blog places the H100 runs on another "
        "cluster (464 H100, 3.2 Tbps)",
    ),
    PublicRun(
        name="fms-fsdp Llama 2 70B, H100",
        source=_FMS,
        quote="| 70b | FSDP | Full AC | 2 | 370 | 800 |",
        setting="FSDP1 FULL_SHARD, 96 H100-80GB, 800 Gbps inter-node, local batch 2, seq "
        "4096, full AC, bf16 reduce, no compile",
        overrides=(
            "hardware=h100_80gb",
            "model=llama2_70b",
            "engine=fsdp1",
            "gpus=96",
            "micro_batch=2",
            "seq_len=4096",
            "ckpt_layers=80",
            "engine.reduce_dtype=bf16",
            "device_spec.network.nics_per_node=8",
            "device_spec.network.nic_gbps=100",
        ),  # fmt: skip
        tokens_per_s_per_gpu=800,
        tokens_per_step=2 * 4096,
        assumed=_FMS_DIFF + "; the torch.compile blog places the H100 runs on another "
        "cluster (464 H100, 3.2 Tbps)",
    ),
)

LEFT_OUT: tuple[tuple[str, str], ...] = (
    ("torchtitan Llama 3 8B and Llama 2 13B/70B with selective AC",
     "per-op or every-N-layer selective checkpointing, which the harness does not model"),
    ("fms-fsdp Llama 2 7B (A100 and H100)", "HSDP: sharded within a node, replicated across"),
    ("fms-fsdp 13B and every torch.compile row", "selective AC of an unstated fraction; "
     "compile fuses the memory-bound kernels the planner prices one by one"),
    ("mosaicml/llm-foundry tables", "MPT models (GELU MLP, learned positions, tied "
     "embeddings, biases), not a Llama shape the harness builds"),
    ("torchtitan H100 tables (2024-12)", "96 GB HBM2e H100s at 500 W, not H100-80GB SXM"),
    ("torchtitan 405B and 2D/3D tables, Megatron-LM", "tensor and pipeline parallelism"),
    ("AWS torchtitan Llama 3 8B on 32 H100", "selective AC; settings inferred, not stated"),
    ("the PyTorch FSDP paper", "its text was not available to check"),
    ("the YaFSDP README's table", "kept as an independent check, never a test row"),
)  # fmt: skip


def predict(run: PublicRun) -> dict[str, Any]:
    from harness.plan.cli import plan

    (row,) = plan(list(run.overrides))
    assert row.time is not None, f"{run.name}: the profile cannot price time"
    predicted = row.time.iteration_time_s
    return {
        "name": run.name,
        "predicted_s": predicted,
        "measured_s": run.measured_s,
        "error": (predicted - run.measured_s) / run.measured_s,
        "predicted_tokens_per_s": row.time.tokens_per_s,
        "measured_tokens_per_s": run.tokens_per_s_per_gpu,
        "mfu": row.time.mfu,
        "exposed_comm_s": row.time.exposed_comm_s,
        "source": run.source,
        "setting": run.setting,
        "assumed": run.assumed,
    }


def comparison() -> list[dict[str, Any]]:
    return [predict(run) for run in RUNS]


def median_abs_error(rows: list[dict[str, Any]]) -> float:
    return statistics.median(abs(r["error"]) for r in rows)


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| run | setting | predicted s | measured s | error | source |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['setting']} | {r['predicted_s']:.2f} | {r['measured_s']:.2f} "
            f"| {r['error'] * 100:+.1f}% | {r['source']} |"
        )
    lines.append("")
    lines.append(f"Median absolute error: {median_abs_error(rows) * 100:.1f}% over {len(rows)} "
                 "runs.")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    rows = comparison()
    print(markdown(rows))
    print("\nAssumed where the source is silent:")
    for run in RUNS:
        print(f"- {run.name}: {run.assumed}")
    print("\nLeft out:")
    for what, why in LEFT_OUT:
        print(f"- {what}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
