"""The lists of a hardware profile (`device_spec`) that the planner indexes: their lengths
and order, checked before any plan reads them."""

from __future__ import annotations

from harness.config import DeviceSpec

# NCCL's per-protocol tables: one entry each for LL, LL128 and Simple.
PROTOCOL_LISTS = ("base_latency_us", "nvlink_step_us", "net_step_us", "ll_max_gbps")


def device_spec_errors(spec: DeviceSpec) -> list[str]:
    errors = _attention_errors(spec)
    if spec.knows_time() and not (len(spec.gemm_tile) == 2 and min(spec.gemm_tile) > 0):
        errors.append(
            f"device_spec.gemm_tile={spec.gemm_tile} must be the two sides of the output tile "
            "one SM computes, e.g. [256, 128]"
        )
    if spec.network.known():
        for field in PROTOCOL_LISTS:
            values = getattr(spec.network, field)
            if len(values) != 3:
                errors.append(
                    f"device_spec.network.{field}={values} must hold three entries "
                    "(NCCL's LL, LL128 and Simple protocols)"
                )
    return errors


def _attention_errors(spec: DeviceSpec) -> list[str]:
    seq, tflops = spec.attention_seq, spec.attention_tflops
    if len(seq) != len(tflops):
        return [
            f"device_spec.attention_seq has {len(seq)} entries but device_spec."
            f"attention_tflops has {len(tflops)}; they pair up (a sequence length, the "
            "attention TFLOP/s at it): give both the same length"
        ]
    if not seq:
        if spec.knows_time():  # the time model prices attention from these
            return [
                "device_spec.attention_seq=[] leaves the planner no attention throughput; "
                "give sequence lengths and device_spec.attention_tflops at each (see "
                "sweeps/hardware/a100_80gb.yaml), or leave device_spec.peak_tflops at 0 "
                "to plan memory only"
            ]
        return []
    if any(b <= a for a, b in zip(seq, seq[1:], strict=False)) or seq[0] <= 0:
        return [f"device_spec.attention_seq={seq} must be positive and increasing"]
    if min(tflops) <= 0:
        return [f"device_spec.attention_tflops={tflops} must all be more than 0"]
    return []
