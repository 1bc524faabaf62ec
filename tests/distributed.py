"""Run a function on N gloo ranks on this machine, for tests."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world_size: int, port: int, fn: Callable, args: tuple, queue: Any) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
    )
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        queue.put((rank, fn(rank, world_size, *args)))
    finally:
        dist.destroy_process_group()


def run_on_ranks(fn: Callable[..., Any], world_size: int, *args: Any) -> list[Any]:
    """Call fn(rank, world_size, *args) on every rank; return the values in rank order."""
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(
        _entry,
        args=(world_size, _free_port(), fn, args, queue),
        nprocs=world_size,
        join=True,
        start_method="spawn",
    )
    values = dict(queue.get() for _ in range(world_size))
    return [values[r] for r in range(world_size)]
