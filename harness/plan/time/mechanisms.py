"""The mechanisms that can make one engine's step longer than another's.

Each is one switch of the planner's programs (`programs.py`, `yafsdp_program.py`) or of the
simulator; each comes from the engine's own code or from first principles, and each
appears as its own term of a prediction: the step's time with it on, less the step's time
with it off. `harness.plan` lists them, and the README says where each comes from.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL_ENGINES = ("yafsdp", "fsdp1", "fsdp2", "fsdp2_tuned", "local")


@dataclass(frozen=True)
class Mechanism:
    name: str
    engines: tuple[str, ...]
    what: str  # one line, for the explanation
    source: str


MECHANISMS: dict[str, Mechanism] = {
    m.name: m
    for m in (
        Mechanism(
            "rate_limiter",
            ("fsdp1",),
            "FSDP1's rate limiter (limit_all_gathers) blocks the host before a gather "
            "while two freed units' events are pending",
            "torch/distributed/fsdp/_limiter_utils.py _FreeEventQueue (2 in flight), "
            "_runtime_utils._unshard: event.synchronize()",
        ),
        Mechanism(
            "fsdp1_flat_grad",
            ("fsdp1",),
            "FSDP1 concatenates each unit's parameter gradients into its flat gradient "
            "on the compute stream (use_orig_params=False)",
            "torch/distributed/fsdp/_flat_param.py: parameters are views of the flat "
            "parameter; autograd's backward of the split writes the flat gradient",
        ),
        Mechanism(
            "fsdp1_grad_upcast",
            ("fsdp1",),
            "FSDP1 upcasts each unit's gradient to fp32 and pre-divides it on the "
            "post-backward stream before its reduce-scatter, then post-divides the shard",
            "torch/distributed/fsdp/_runtime_utils.py _post_backward_hook, _reduce_grad, "
            "_div_if_needed, _get_gradient_predivide_factor",
        ),
        Mechanism(
            "fsdp2_copy_in_out",
            ("fsdp2", "fsdp2_tuned"),
            "FSDP2 copies each gathered unit out into its parameters and each unit's "
            "gradients into the reduce-scatter input, on the compute stream",
            "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py "
            "foreach_all_gather_copy_out (split_with_sizes_copy), foreach_reduce "
            "(chunk_cat)",
        ),
        Mechanism(
            "yafsdp_buffers",
            ("yafsdp",),
            "yafsdp copies each weight's gradient into its unit's gradient buffer and the "
            "buffer into the fp32 staging, and adds each reduced shard into the master "
            "gradient, on the compute stream",
            "yafsdp_impl/_schedule.py gradient_arrived (a post-accumulate hook); "
            "yafsdp_impl/_reduce_scatter.py _reduce_scatter, _add_into_master_grad",
        ),
        Mechanism(
            "launch_overhead",
            ALL_ENGINES,
            "the host launches every kernel and runs every engine hook; where it falls "
            "behind the GPU, the GPU waits",
            "hardware profile: launch_us, hook_us",
        ),
        Mechanism(
            "side_stream_sharing",
            ALL_ENGINES,
            "memory-bound kernels on a side stream (FSDP1's gradient upcasts, FSDP2's "
            "gather copy-in) share the SMs and memory bandwidth of the compute they overlap",
            "work conservation: both streams run on the same SMs and HBM; NVIDIA/nccl "
            "issue 1428 shows overlapped kernels slowing",
        ),
        Mechanism(
            "nccl_sm_contention",
            ALL_ENGINES,
            "NCCL's kernels hold SMs while a collective runs, so compute that overlaps "
            "one runs slower",
            "hardware profile: nccl_sms of sm_count (NVIDIA/nccl issue 689)",
        ),
        Mechanism(
            "give_way",
            ALL_ENGINES,
            "a side kernel or collective at the compute stream's priority waits for the "
            "running compute kernel's last wave (each further one in its chain for one more "
            "kernel); at a higher priority, about one wave",
            "CUDA Programming Guide, Stream Priorities; NVIDIA/nccl issues 689 and 1431; "
            "stream priorities per engine and torch version: harness/plan/time/streams.py",
        ),
        Mechanism(
            "slowest_rank",
            ALL_ENGINES,
            "a collective starts when the last of W ranks is ready: each meets the running "
            "kernel at its own phase, so the wait is the largest of W",
            "order statistics of W uniform phases: E[max] = s*W/(W+1) "
            "(harness/plan/time/handout.py)",
        ),
    )
}


def applicable(engine: str) -> list[str]:
    return [name for name, m in MECHANISMS.items() if engine in m.engines]
