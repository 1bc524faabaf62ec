"""Gradient clipping by the global L2 norm, from the squared norms the reduce-scatters leave.

On the step's last micro-batch each finished reduce-scatter adds its shard's squared norm
to `grad_sq_norms` (see `_reduce_scatter.py`); at the end of that backward their sum's
all-reduce starts, and `clip_grad_norm_` waits for it and scales the master gradients.
Where the gradients changed outside backward (or were clipped already) the norms are taken
afresh.

`Clipping` is a part of `Schedule`, kept apart by concept: its methods run on the
schedule's own state, declared below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch.autograd.profiler import record_function

from yafsdp_impl import annotation_names as names
from yafsdp_impl._events import DONE

if TYPE_CHECKING:
    from yafsdp_impl._buffers import Buffers
    from yafsdp_impl._collectives import Comm
    from yafsdp_impl._events import Event, Streams


def add_squared_norm(acc: torch.Tensor, grad: torch.Tensor) -> None:
    """acc (fp64) += the squared L2 norm of `grad`, without a gradient-sized temporary on GPU.

    torch's CPU fp32 norm sums far less exactly than its CUDA one (1e-4 off at 3M normal
    samples, 3e-3 at 30M, against an fp64 sum), so on CPU the norm is taken in fp64, copy
    and all; on CUDA in fp32 (`add_squared_norm_fp32`).
    """
    if grad.is_cuda:
        add_squared_norm_fp32(acc, grad)
    else:
        acc.add_(torch.linalg.vector_norm(grad, dtype=torch.float64).square())


def add_squared_norm_fp32(acc: torch.Tensor, grad: torch.Tensor) -> None:
    """acc (fp64) += the squared L2 norm of `grad`, the norm taken in fp32: the GPU path.

    On CUDA the fp32 norm is reduced by many partial sums and a tree into one scalar (a
    bf16 or fp16 `grad` is read as it is and summed in fp32); an fp64 norm would first copy
    the slice to fp64. The square is taken in fp64 (addcmul promotes to `acc`'s dtype), so
    squaring loses nothing. Device-agnostic: the CPU tests hold it to an fp64 reference.
    """
    norm = torch.linalg.vector_norm(grad, dtype=torch.float32)
    acc.addcmul_(norm, norm)


class Clipping:
    """The gradients' squared norms, their all-reduce, and the clipping that reads it."""

    # The schedule's state these methods read (set in `Schedule.__init__`).
    buffers: Buffers
    comm: Comm
    streams: Streams
    log: list[tuple[str, str]]

    def _init_clipping(self, n_units: int) -> None:
        # Squared L2 norm of each unit's (and, last, the resident's) final reduced shard,
        # summed in fp64 as the reduce-scatters finish; valid once the step's last backward
        # has ended and until the gradients are clipped or a new step opens.
        self.grad_sq_norms = torch.zeros(n_units + 1, dtype=torch.float64)
        self.grad_sq_norms = self.grad_sq_norms.to(self.buffers.device)
        self.grad_norms_valid = False
        # The global squared norm: its all-reduce starts as the last shard's norm is known
        # (the end of the step's last backward); clipping waits for it.
        self.norm_total: torch.Tensor | None = None
        self.norm_reduced: Event = DONE

    def _launch_norm_all_reduce(self) -> None:
        """Start the all-reduce of the summed squared shard norms (every rank, in the same
        place of its collective order: the end of the step's last backward)."""
        total = self.grad_sq_norms.sum()
        with record_function(names.collective("all_reduce", names.CLIP)):
            self.norm_reduced = self.streams.launch(
                lambda a: self.comm.all_reduce_sum(total, a), self.streams.compute_event()
            )
        self.norm_total = total
        self.log.append(("all_reduce", names.CLIP))

    def _drop_norm_all_reduce(self) -> None:
        self.norm_reduced.wait()
        self.norm_reduced, self.norm_total = DONE, None

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Clip the sharded gradients by their global L2 norm; return the norm (see
        `YaFSDP.clip_grad_norm_`)."""
        b = self.buffers
        sq = self.norm_total
        if self.grad_norms_valid and sq is not None:  # reduced since the end of backward
            with record_function(names.wait("all_reduce", names.CLIP)):
                self.norm_reduced.wait()
        else:  # clipped already, or gradients changed outside backward
            self._drop_norm_all_reduce()
            self.grad_sq_norms.zero_()
            for i, g in enumerate((b.master_grad, b.resident_master_grad)):
                add_squared_norm(self.grad_sq_norms[i], g)
            sq = self.grad_sq_norms.sum()
            with record_function(names.collective("all_reduce", names.CLIP)):
                self.comm.all_reduce_sum(sq)
            self.log.append(("all_reduce", names.CLIP))
        self.norm_reduced, self.norm_total = DONE, None
        self.grad_norms_valid = False  # the scale below changes the gradients
        norm = sq.sqrt()
        coef = (max_norm / (norm + 1e-6)).clamp(max=1.0).float()
        b.master_grad.mul_(coef)
        b.resident_master_grad.mul_(coef)
        return norm.float()
