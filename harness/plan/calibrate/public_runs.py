"""Public measured FSDP runs on A100/H100 clusters, and the planner's predictions of them.

`python -m harness.plan.calibrate.public_runs` prints the table (predicted and measured iteration
time, the error, the source); `tests/plan/test_plan_public.py` holds the planner to it.
No constant of the planner was fitted to these rows: every figure in the hardware profiles
names its own public source, none of them these runs.

A row is used when its setting maps onto what the planner models: pure FSDP (no tensor,
pipeline or context parallelism, no HSDP), a Llama shape the harness knows, bf16 without
float8 or torch.compile, and checkpointing of none or every block. Rows left out, and
why, are listed in `LEFT_OUT`.

`SPEEDUP_RUNS` are public engine-against-engine measurements: two engines on the same
hardware, model and setting, quoted as the source printed them. The planner predicts both
engines and the speedup (T_b - T_a) / T_b, as the README defines it; the measured
speedup comes from the quoted throughputs (a range where the source gives one). Nothing is
fitted to them either. Sources found and left out, and why: `SPEEDUP_LEFT_OUT`.
"""

from __future__ import annotations

import functools
import statistics
import sys
from dataclasses import dataclass
from typing import Any

from harness.markdown import markdown_table


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


@dataclass(frozen=True)
class SpeedupRun:
    """Engine `a` against engine `b`: the same `overrides` but the engine."""

    name: str
    source: str
    quote: str
    setting: str
    engines: tuple[str, str]  # (a, b): the speedup is a's over b
    overrides: tuple[str, ...]
    tokens_per_s: tuple[tuple[float, float], tuple[float, float]]  # a's, b's (low, high)
    assumed: str

    def measured(self) -> tuple[float, float, float]:
        """The speedup (T_b - T_a) / T_b = 1 - tps_b / tps_a at the quoted ranges' middles,
        and its least and most over the ranges."""
        (a_lo, a_hi), (b_lo, b_hi) = self.tokens_per_s
        mid = 1 - ((b_lo + b_hi) / 2) / ((a_lo + a_hi) / 2)
        return mid, 1 - b_hi / a_lo, 1 - b_lo / a_hi


_TITAN_165 = ("pytorch/torchtitan commit 83c879f (pull request 165, 'Used per-parameter "
              "FSDP', 2024-03-28), https://github.com/pytorch/torchtitan/pull/165")  # fmt: skip

SPEEDUP_RUNS: tuple[SpeedupRun, ...] = (
    SpeedupRun(
        name="torchtitan FSDP2 vs FSDP1, Llama 2 7B",
        source=_TITAN_165,
        quote="FSDP1 (AC): ... 6100-6200 WPS; FSDP2 (AC): ... 6100-6300 WPS",
        setting="8 H100 (95 GiB), local batch 8, seq 2048, full AC, bf16 / fp32 "
        "reduce-scatter, eager",
        engines=("fsdp2", "fsdp1"),
        overrides=(
            "hardware=h100_80gb",
            "model=llama2_7b",
            "gpus=8",
            "micro_batch=8",
            "seq_len=2048",
            "ckpt_layers=32",
            "torch_version=2.4",
        ),  # fmt: skip
        tokens_per_s=((6100, 6300), (6100, 6200)),
        assumed="torchtitan's '7B' flavour is Llama 2 7B's shape with its 32000-token "
        "tokenizer; its FSDP1 used use_orig_params=True, BACKWARD_PRE and no forward "
        "prefetch, its FSDP2 kept the last block unsharded after forward (the commit names "
        "that and the single divide as why FSDP2 is faster); its 95 GiB H100s are priced "
        "with the H100-80GB SXM profile (a speedup, not a time, is compared); torch was "
        "'the latest pytorch nightly' (its README), 2.4 in development in March 2024",
    ),
)

SPEEDUP_LEFT_OUT: tuple[tuple[str, str], ...] = (
    ("torchtitan PR 165's SAC rows", "selective per-op checkpointing, not modelled"),
    ("torchtitan docs/fsdp.md, 'higher MFU' for FSDP2 on Llama-7B, 8 H100",
     "no figure of its own; it points to PR 165, used above"),
    ("FSDP2 RFC (pytorch/pytorch issue 114299)", "'on-par throughput' on internal Llama "
     "models: no figure and no setting"),
    ("pytorch/pytorch PR 120919", "~1.5% from ReduceOp.AVG is FSDP2 against itself, "
     "setting not stated"),
    ("TorchTitan paper (arXiv 2410.06511)", "its text was not available to check; the "
     "1.5% FSDP2-over-FSDP1 figure quoted elsewhere names no setting"),
    ("SimpleFSDP paper (arXiv 2411.00284)", "SimpleFSDP runs under torch.compile, which the "
     "planner does not model; it is no engine of this harness"),
    ("torchtune FSDP1 -> FSDP2 recipe migrations (PRs 855, 1517, 1536)", "LoRA and DPO "
     "fine-tuning with frozen weights, not modelled"),
    ("the YaFSDP README's table", "kept as an independent check, never a test row"),
)  # fmt: skip


def predict_speedup(run: SpeedupRun) -> dict[str, Any]:
    from harness.plan.cli import plan

    times = {}
    for engine in run.engines:
        (row,) = plan([*run.overrides, f"engine={engine}"], ablate=False)
        assert row.time is not None, f"{run.name}: the profile cannot price time"
        times[engine] = row.time.iteration_time_s
    a, b = (times[e] for e in run.engines)
    mid, low, high = run.measured()
    return {
        "name": run.name,
        "engines": run.engines,
        "setting": run.setting,
        "predicted_s": times,
        "predicted_speedup": (b - a) / b,
        "measured_speedup": mid,
        "measured_range": (low, high),
        "source": run.source,
    }


def speedup_markdown(rows: list[dict[str, Any]]) -> str:
    header = ["run", "setting", "engines", "predicted speedup", "measured speedup", "source"]
    cells = []
    for r in rows:
        a, b = r["engines"]
        low, high = r["measured_range"]
        measured = f"{r['measured_speedup'] * 100:+.1f}% ({low * 100:+.1f}% to {high * 100:+.1f}%)"
        predicted = f"{r['predicted_speedup'] * 100:+.1f}%"
        cells.append([r["name"], r["setting"], f"{a} vs {b}", predicted, measured, r["source"]])
    return markdown_table(header, cells)


def predict(run: PublicRun) -> dict[str, Any]:
    from harness.plan.cli import plan

    (row,) = plan(list(run.overrides), ablate=False)  # the time alone, not each term's
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


@functools.lru_cache(maxsize=1)
def _comparison() -> tuple[dict[str, Any], ...]:
    return tuple(predict(run) for run in RUNS)


def comparison() -> list[dict[str, Any]]:
    """Each public run's prediction (planned once per process: the tests and the accuracy
    page share it)."""
    return [dict(r) for r in _comparison()]


def median_abs_error(rows: list[dict[str, Any]]) -> float:
    return statistics.median(abs(r["error"]) for r in rows)


def markdown(rows: list[dict[str, Any]]) -> str:
    header = ["run", "setting", "predicted s", "measured s", "error", "source"]
    cells = [[r["name"], r["setting"], f"{r['predicted_s']:.2f}", f"{r['measured_s']:.2f}",
              f"{r['error'] * 100:+.1f}%", r["source"]] for r in rows]  # fmt: skip
    lines = [markdown_table(header, cells), ""]
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
    print("\nEngine against engine (speedup of the first over the second, (T_b - T_a) / T_b):\n")
    print(speedup_markdown([predict_speedup(pair) for pair in SPEEDUP_RUNS]))
    for pair in SPEEDUP_RUNS:
        print(f"- {pair.name}: {pair.assumed}")
    print("\nEngine-against-engine sources left out:")
    for what, why in SPEEDUP_LEFT_OUT:
        print(f"- {what}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
