"""Device time of the model's kernels, kernel by kernel (`kernels.py` lists them).

- GEMM: 2MNK FLOPs at the device's peak times the best fraction a large bf16 GEMM reaches,
  less wave quantization (the output's tiles, one per SM at a time: a last, partial wave
  costs a whole one), and never faster than reading its operands and writing its output
  at the memory bandwidth (skinny GEMMs are memory-bound).
- Attention (FlashAttention-2, which SDPA runs for bf16 on A100/H100): FLOPs counted as
  FlashAttention-2 counts them (forward 4 x seq^2 x head dim x heads, half of it when
  causal; backward 2.5 x the forward) at the forward+backward throughput it reaches at the
  job's sequence length (head dim 128), interpolated between published lengths.
- Memory-bound kernels (casts, norms, rotary, SwiGLU, residual adds, the loss, copies):
  the bytes they read and write at the achieved memory bandwidth.
Every kernel takes at least the device's shortest kernel time.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from harness.config import DeviceSpec
from harness.plan.time.kernels import Kernel, KernelCensus


@dataclass(frozen=True, slots=True)
class PhaseTime:
    seconds: float
    kernels: int
    by_kind: dict[str, float]  # gemm, attention, memory


def wave_efficiency(m: int, n: int, tile: tuple[int, int], sms: int) -> float:
    """Fraction of the last wave's SMs that do work, averaged over the waves."""
    if not sms or not tile[0] or not tile[1]:
        return 1.0
    tiles = math.ceil(m / tile[0]) * math.ceil(n / tile[1])
    waves = tiles / sms
    return waves / math.ceil(waves)


# TensorIterator's elementwise launch (aten/src/ATen/native/cuda/Loops.cuh): 128 threads a
# block, 4 elements a thread; 2048 resident threads an SM (A100 and H100), so 16 blocks.
ELEMENTWISE_BLOCK_ELEMENTS = 128 * 4
ELEMENTWISE_BLOCKS_PER_SM = 16


def elementwise_waves(nbytes: float, sms: int, bytes_per_element: int = 4) -> float:
    """Waves of an elementwise kernel that reads and writes `nbytes` in all."""
    blocks = nbytes / 2 / bytes_per_element / ELEMENTWISE_BLOCK_ELEMENTS
    return max(1.0, math.ceil(blocks / (ELEMENTWISE_BLOCKS_PER_SM * max(sms, 1))))


class ComputeModel:
    def __init__(self, spec: DeviceSpec, element_bytes: int) -> None:
        self.spec = spec
        self.element_bytes = element_bytes
        self.peak = spec.peak_tflops * 1e12
        self.memory = spec.memory_gbps * 1e9 * spec.memory_efficiency
        self.floor = spec.kernel_floor_us * 1e-6

    def gemm_s(self, m: int, n: int, k: int) -> float:
        s = self.spec
        tile = (int(s.gemm_tile[0]), int(s.gemm_tile[1]))
        rate = self.peak * s.gemm_efficiency * wave_efficiency(m, n, tile, s.sm_count)
        flops = 2.0 * m * n * k
        moved = (m * k + k * n + m * n) * self.element_bytes
        return max(flops / rate, moved / self.memory, self.floor)

    def attention_tflops(self, seq: int) -> float:
        """Forward+backward throughput at `seq`, log-linear between published lengths,
        the nearest one beyond them."""
        xs, ys = self.spec.attention_seq, self.spec.attention_tflops
        if seq <= xs[0]:
            return ys[0]
        if seq >= xs[-1]:
            return ys[-1]
        i = bisect.bisect_left(xs, seq)
        w = (math.log(seq) - math.log(xs[i - 1])) / (math.log(xs[i]) - math.log(xs[i - 1]))
        return ys[i - 1] + w * (ys[i] - ys[i - 1])

    def attention_s(self, kernel: Kernel, seq: int, micro_batch: int) -> float:
        assert kernel.attention is not None
        _b, heads, _kv, head_dim, causal, backward = kernel.attention
        forward = 4.0 * micro_batch * heads * seq * seq * head_dim * (0.5 if causal else 1.0)
        flops = forward * (2.5 if backward else 1.0)
        return max(flops / (self.attention_tflops(seq) * 1e12), self.floor)

    def memory_s(self, nbytes: float) -> float:
        return max(nbytes / self.memory, self.floor)

    def kernel_s(self, kernel: Kernel, seq: int, micro_batch: int) -> float:
        tokens = seq * micro_batch
        if kernel.kind == "gemm":
            return self.gemm_s(*kernel.at(tokens))
        if kernel.kind == "attention":
            return self.attention_s(kernel, seq, micro_batch)
        return self.memory_s(kernel.at(tokens)[0])

    def kernel_waves(self, kernel: Kernel, seq: int, micro_batch: int) -> float:
        """Waves of the SMs the kernel's thread blocks take (one block per SM at a time for
        GEMM tiles and attention tiles; elementwise blocks many to an SM)."""
        sms = max(self.spec.sm_count, 1)
        tokens = seq * micro_batch
        if kernel.kind == "gemm":
            m, n, _k = kernel.at(tokens)
            tile = (int(self.spec.gemm_tile[0]) or 128, int(self.spec.gemm_tile[1]) or 128)
            return float(math.ceil(math.ceil(m / tile[0]) * math.ceil(n / tile[1]) / sms))
        if kernel.kind == "attention":
            assert kernel.attention is not None
            heads = kernel.attention[1]
            # FlashAttention-2: one block per 128 query rows per head and sequence
            return float(math.ceil(micro_batch * heads * math.ceil(seq / 128) / sms))
        return elementwise_waves(kernel.at(tokens)[0], sms)

    def phase(self, census: KernelCensus, phase: str, seq: int, micro_batch: int) -> PhaseTime:
        by_kind = {"gemm": 0.0, "attention": 0.0, "memory": 0.0}
        for kernel in census.phases[phase]:
            by_kind[kernel.kind] += self.kernel_s(kernel, seq, micro_batch)
        return PhaseTime(sum(by_kind.values()), census.count(phase), by_kind)
