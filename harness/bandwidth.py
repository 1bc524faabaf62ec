"""Measured all-gather and reduce-scatter time on this cluster, over message sizes.

Standalone: `python -m harness.bandwidth [-o calibration.json]`, under torchrun or srun (one
rank per GPU), or on its own, when it starts `--ranks` local ranks itself (every GPU here,
or 2 CPU ranks with gloo). It times all-gathers in the param dtype and reduce-scatters in
the reduce dtype (fp32 by default: the published engines' reduction) over message sizes
from a few KiB (latency-bound) to the largest unit of a 70B model, each `--repeats` times
after a warm-up, every rank timing the same call; a repeat's time is the slowest rank's.
It writes the median and p90 of each size with its bus bandwidth (bytes x (P-1)/P per
second; gloo's reduce-scatter is an all-reduce underneath, twice that) to a calibration
file that `python -m harness.plan calibration=<file>` prices collectives with.

Inside a job (`probe_bandwidth=true`), `probe_bandwidth` measures the same way at the job's
own unit sizes and records the figures in result.json.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gc
import json
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from harness.dtypes import DTYPES
from harness.placement import nccl_version, synchronize
from yafsdp_impl import all_gather, has_native_reduce_scatter, reduce_scatter

SCHEMA = "yafsdp-bench.calibration/1"
KINDS = ("all_gather", "reduce_scatter")
KIB, MIB = 2**10, 2**20
DEFAULT_OUT = Path("outputs/calibration.json")  # under outputs/, which git ignores
# Message sizes (the unsharded bytes): latency-bound to a 70B layer's fp32 gradients.
GPU_SIZES = (8 * KIB, 128 * KIB, 2 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, 1024 * MIB)
CPU_SIZES = (8 * KIB, 128 * KIB, 1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB)
GPU_REPEATS, CPU_REPEATS = 20, 10
WARMUP = 2


def _timed(run: Callable[[], Any], device: torch.device, repeats: int) -> list[float]:
    """Each repeat's time on the slowest rank: ranks start together at a barrier, each
    times the call to its device's completion, then they agree on the maximum."""
    group = dist.distributed_c10d._get_default_group()
    for _ in range(WARMUP):  # connections, buffers, NCCL's first-use set-up
        run()
    synchronize(device)
    times = []
    for _ in range(repeats):
        dist.barrier()
        synchronize(device)
        start = time.perf_counter()
        run()
        synchronize(device)
        times.append(time.perf_counter() - start)
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    return slowest.tolist()


def _row(nbytes: int, times: list[float], world_size: int, rounds: int) -> dict[str, Any]:
    """Median and p90 time; bus bandwidth at each (rounds: 2 for an all-reduce)."""
    median = statistics.median(times)
    p90 = sorted(times)[min(len(times) - 1, int(round(0.9 * (len(times) - 1))))]
    moved = rounds * nbytes * (world_size - 1) / world_size
    return {
        "bytes": nbytes,
        "seconds": median,
        "p90_seconds": p90,
        "bus_gbps": moved / median / 1e9,
        "p90_bus_gbps": moved / p90 / 1e9,
        "repeats": len(times),
    }


def measure(
    sizes: dict[str, list[int]], dtypes: dict[str, torch.dtype], device: torch.device,
    repeats: int,
) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    """{kind: rows} for each kind's message sizes (bytes, unsharded), through the same
    collective shim the yafsdp engine uses."""
    group = dist.distributed_c10d._get_default_group()
    p, rank = dist.get_world_size(), dist.get_rank()
    gloo = not has_native_reduce_scatter(group)
    rows: dict[str, list[dict[str, Any]]] = {kind: [] for kind in sizes}
    for kind, kind_sizes in sizes.items():
        dtype = dtypes[kind]
        item = torch.empty(0, dtype=dtype).element_size()
        for nbytes in kind_sizes:
            numel = max(p, nbytes // item // p * p)
            full = torch.empty(numel, dtype=dtype, device=device)
            run: Callable[[], Any]
            if kind == "all_gather":
                shard = torch.empty(numel // p, dtype=dtype, device=device)
                run = functools.partial(all_gather, full, shard, group, False)
                rounds = 1
            else:
                out = None if gloo else torch.empty(numel // p, dtype=dtype, device=device)
                run = functools.partial(reduce_scatter, out, full, group, rank, p, False)
                rounds = 2 if gloo else 1  # gloo's reduce-scatter is an all-reduce
            rows[kind].append(_row(numel * item, _timed(run, device, repeats), p, rounds))
            del full, run
    return rows


def probe_bandwidth(cfg: Any, device: torch.device) -> dict[str, Any]:
    """A job's probe (`probe_bandwidth=true`): the job's block and largest unit sizes."""
    from harness.models.shapes import shape_of
    from harness.models.units import fsdp1_units

    p = dist.get_world_size()
    units = fsdp1_units(shape_of(cfg.model), p)
    dtypes = {
        "all_gather": DTYPES[cfg.dtype],
        "reduce_scatter": DTYPES[cfg.engine.reduce_dtype],
    }
    sizes = {
        kind: [n * torch.empty(0, dtype=dt).element_size()
               for n in sorted({units.block, units.largest})]
        for kind, dt in dtypes.items()
    }  # fmt: skip
    repeats = GPU_REPEATS if device.type == "cuda" else CPU_REPEATS
    try:
        rows = measure(sizes, dtypes, device, repeats)
    finally:
        release_probe_buffers(device)
    return {**_where(cfg.gpus_per_node), **rows}


def release_probe_buffers(device: torch.device) -> None:
    """Give the probe's buffers (up to the largest unit in fp32: 4.2 GB at Llama 3 70B)
    back to the device: the caching allocator would keep them, counted in the build's
    peaks and missing from the free memory yafsdp's budget reads."""
    gc.collect()
    if device.type == "cuda":
        synchronize(device)  # the last collective has let go of them
        torch.cuda.empty_cache()


def _where(gpus_per_node: int) -> dict[str, Any]:
    group = dist.distributed_c10d._get_default_group()
    p = dist.get_world_size()
    return {
        "backend": dist.get_backend(group),
        "world_size": p,
        "gpus_per_node": gpus_per_node,
        "nodes": max(1, -(-p // gpus_per_node)),
    }


# ---- the standalone tool -----------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m harness.bandwidth",
        description="Measure all-gather and reduce-scatter bus bandwidth over message sizes "
        "and write a calibration file for `python -m harness.plan calibration=<file>`.",
    )
    ap.add_argument(
        "-o",
        "--out",
        default=str(DEFAULT_OUT),
        help=f"calibration file to write (default: {DEFAULT_OUT}, ignored by git)",
    )
    ap.add_argument("--ranks", type=int, default=0,
                    help="ranks to start when not under torchrun/srun (default: every local "
                    "GPU, or 2 CPU ranks)")  # fmt: skip
    ap.add_argument(
        "--gpus-per-node",
        type=int,
        default=0,
        help="ranks per node (default: LOCAL_WORLD_SIZE or the ranks here)",
    )
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES), help="all-gather dtype")
    ap.add_argument("--reduce-dtype", default="fp32", choices=sorted(DTYPES),
                    help="reduce-scatter dtype")  # fmt: skip
    ap.add_argument("--repeats", type=int, default=0,
                    help=f"timed repeats per size (default {GPU_REPEATS} on GPU, "
                    f"{CPU_REPEATS} on CPU)")  # fmt: skip
    ap.add_argument(
        "--max-mib",
        type=float,
        default=0,
        help="largest message in MiB (default: 1024 on GPU, 64 on CPU)",
    )
    ap.add_argument("--cpu", action="store_true", help="CPU ranks with gloo even where GPUs exist")
    return ap


ONE_RANK = "one rank has no bus to measure (bus bandwidth is bytes x (P-1)/P per second: 0)"


def _validated(args: argparse.Namespace) -> str | None:
    if args.ranks < 0 or args.repeats < 0 or args.max_mib < 0 or args.gpus_per_node < 0:
        return "--ranks, --repeats, --max-mib and --gpus-per-node must not be negative"
    if args.ranks == 1:
        return f"--ranks 1: {ONE_RANK}; use --ranks 2 or more"
    out = Path(args.out)
    if out.exists() and out.is_dir():
        return f"--out {out} is a directory; name a file, e.g. {out / 'calibration.json'}"
    if not out.parent.exists() and out != DEFAULT_OUT:
        return f"--out {out}: the directory {out.parent} does not exist; create it first"
    return None


def _export_slurm_env() -> None:
    """Under srun without torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_* from SLURM."""
    if "RANK" in os.environ or "SLURM_PROCID" not in os.environ:
        return
    import submitit

    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)


def _rank_main(args: argparse.Namespace) -> dict[str, Any] | None:
    """One rank: measure, and on rank 0 return the calibration."""
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    gpu = torch.cuda.is_available() and not args.cpu
    if gpu:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    backend = "nccl" if gpu else "gloo"
    dist.init_process_group(backend, device_id=device if gpu else None)
    try:
        sizes: tuple[int, ...] = GPU_SIZES if gpu else CPU_SIZES
        if args.max_mib:
            sizes = tuple(s for s in sizes if s <= args.max_mib * MIB) or (sizes[0],)
        repeats = args.repeats or (GPU_REPEATS if gpu else CPU_REPEATS)
        dtypes = {"all_gather": DTYPES[args.dtype], "reduce_scatter": DTYPES[args.reduce_dtype]}
        rows = measure({k: list(sizes) for k in KINDS}, dtypes, device, repeats)
        hosts: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(hosts, socket.gethostname())
        if rank != 0:
            return None
        per_node = args.gpus_per_node or local_world
        now = datetime.datetime.now(datetime.timezone.utc)
        return {
            "schema": SCHEMA,
            "measured_at": now.isoformat(timespec="seconds"),
            **_where(per_node),
            "hosts": sorted(set(hosts)),
            "device": torch.cuda.get_device_name(device) if gpu else "cpu",
            "torch": torch.__version__,
            "nccl": nccl_version() if gpu else None,
            "dtypes": {"all_gather": args.dtype, "reduce_scatter": args.reduce_dtype},
            **rows,
        }
    finally:
        dist.destroy_process_group()


def _spawned(local_rank: int, world: int, port: int, argv: list[str]) -> None:
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world),
                      LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))  # fmt: skip
    args = _parser().parse_args(argv)
    result = _rank_main(args)
    if result is not None:
        _write(Path(args.out), result)


def _write(path: Path, calibration: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)  # outputs/ of the default
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(calibration, indent=1) + "\n")
    tmp.replace(path)


def summary(calibration: dict[str, Any]) -> str:
    lines = [f"{calibration['world_size']} ranks on {calibration['nodes']} node(s), "
             f"{calibration['backend']}, {calibration['device']}"]  # fmt: skip
    for kind in KINDS:
        for row in calibration.get(kind, []):
            lines.append(
                f"  {kind:15s} {row['bytes'] / MIB:10.3f} MiB  median {row['seconds'] * 1e3:9.3f}"
                f" ms  bus {row['bus_gbps']:8.2f} GB/s  (p90 {row['p90_bus_gbps']:.2f})"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    problem = _validated(args)
    if problem:
        print(f"[harness.bandwidth] refused: {problem}", file=sys.stderr)
        return 2
    _export_slurm_env()
    if "RANK" in os.environ and os.environ.get("WORLD_SIZE") == "1":
        print(f"[harness.bandwidth] refused: WORLD_SIZE=1: {ONE_RANK}; start 2 or more "
              "ranks (torchrun --nproc-per-node, srun --ntasks)", file=sys.stderr)  # fmt: skip
        return 2
    if "RANK" in os.environ:  # under torchrun or srun
        result = _rank_main(args)
        if result is not None:
            _write(Path(args.out), result)
            print(summary(result))
            print(f"calibration written to {args.out}")
        return 0
    gpus = torch.cuda.device_count() if not args.cpu else 0
    ranks = args.ranks or gpus or 2
    if gpus and ranks > gpus:
        print(f"[harness.bandwidth] refused: --ranks {ranks} is more than the {gpus} GPUs "
              "here; use --ranks <= that, or --cpu", file=sys.stderr)  # fmt: skip
        return 2
    if ranks == 1:
        print(f"[harness.bandwidth] refused: this machine has 1 GPU, and {ONE_RANK}; use "
              "--cpu --ranks 2 for gloo here, or srun across GPUs", file=sys.stderr)  # fmt: skip
        return 2
    from harness.ports import free_port

    torch.multiprocessing.spawn(_spawned, args=(ranks, free_port(), argv), nprocs=ranks)
    result = json.loads(Path(args.out).read_text())
    print(summary(result))
    print(f"calibration written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
