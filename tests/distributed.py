"""Run a function on N gloo ranks on this machine (one process each), for tests."""

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


def free_port() -> int:
    """A free TCP port on the loopback (for tests that start ranks by environment)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, fn: Callable, world_size: int, out_dir: str, args: tuple) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
    )
    torch.set_num_threads(1)
    # A file rendezvous: no port to race for, and nothing of the harness needed.
    rendezvous = f"file://{os.path.join(out_dir, 'rendezvous')}"
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=world_size)
    out = os.path.join(out_dir, f"{rank}.pt")
    try:
        torch.save({"ok": True, "result": fn(rank, world_size, *args)}, out)
    except BaseException:
        torch.save({"ok": False, "error": traceback.format_exc()}, out)
        raise
    finally:
        dist.destroy_process_group()


def run_on_ranks(
    fn: Callable[..., Any], world_size: int, *args: Any, start_method: str = "spawn"
) -> list[Any]:
    """Call fn(rank, world_size, *args) on every rank; return the values in rank order.

    A rank that fails raises AssertionError here with that rank's traceback. `spawn` (the
    default) needs `fn` importable by name; `fork` starts faster and takes closures' state
    as it is, for tests that launch many small groups.
    """
    with tempfile.TemporaryDirectory() as out_dir:
        try:
            mp.start_processes(
                _entry,
                args=(fn, world_size, out_dir, args),
                nprocs=world_size,
                start_method=start_method,
            )
        except mp.ProcessRaisedException:
            pass  # the rank's traceback is in its result file
        results = []
        for r in range(world_size):
            path = os.path.join(out_dir, f"{r}.pt")
            if not os.path.exists(path):
                raise AssertionError(f"rank {r} ended without a result (killed?)")
            payload = torch.load(path, weights_only=False)
            if not payload["ok"]:
                raise AssertionError(f"rank {r} failed:\n{payload['error']}")
            results.append(payload["result"])
        return results
