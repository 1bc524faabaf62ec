"""Run a function on N gloo ranks (spawned processes on a free port) and collect results."""

from __future__ import annotations

import os
import socket
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, fn: Callable, world_size: int, port: int, out_dir: str, args: tuple) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        result: Any = fn(rank, world_size, *args)
        torch.save({"ok": True, "result": result}, os.path.join(out_dir, f"{rank}.pt"))
    except BaseException:
        torch.save(
            {"ok": False, "error": traceback.format_exc()}, os.path.join(out_dir, f"{rank}.pt")
        )
        raise
    finally:
        dist.destroy_process_group()


def run_ranks(fn: Callable, world_size: int, *args: Any) -> list[Any]:
    """fn(rank, world_size, *args) on each rank; returns the per-rank results in rank order."""
    with tempfile.TemporaryDirectory() as out_dir:
        try:
            mp.start_processes(
                _entry,
                args=(fn, world_size, _free_port(), out_dir, args),
                nprocs=world_size,
                start_method="fork",
            )
        except mp.ProcessRaisedException:
            pass  # the rank's traceback is in its result file
        results = []
        for r in range(world_size):
            payload = torch.load(os.path.join(out_dir, f"{r}.pt"), weights_only=False)
            if not payload["ok"]:
                raise AssertionError(f"rank {r} failed:\n{payload['error']}")
            results.append(payload["result"])
        return results
