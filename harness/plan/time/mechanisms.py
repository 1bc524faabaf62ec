"""The mechanisms that can make one engine's step longer than another's.

Each is one switch of the planner's programs (`programs.py`, `yafsdp_program.py`) or of the
simulator; each comes from the engine's own code or from first principles, and each
appears as its own term of a prediction: the step's time with it on, less the step's time
with it off. `harness.plan` lists them, and the README says where each comes from.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL_ENGINES = ("yafsdp", "fsdp1", "fsdp2", "fsdp2_tuned", "local", "ya_fsdp_v1")


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
            "(use_orig_params=False): the backward of the split that made their views",
            "torch/distributed/fsdp/_flat_param.py: parameters are views of the flat "
            "parameter; autograd's backward of the split writes the flat gradient",
        ),
        Mechanism(
            "fsdp1_cat_on_unshard",
            ("fsdp1",),
            "FSDP1's cat of a unit's gradients runs on the unshard stream, behind the "
            "all-gather issued there last; the compute stream waits for it before the next "
            "prefetch, and the cast and pre-divide wait for it",
            "docs/source/notes/cuda.rst 'Stream semantics of backward passes'; "
            "torch/csrc/autograd/input_metadata.cpp; torch/distributed/fsdp/_runtime_utils.py "
            "_unshard, _pre_backward_hook, _post_backward_hook; _flat_param.py "
            "_use_unsharded_views (torch 2.1 to 2.13)",
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
            "ya_fsdp_v1_grad_copy",
            ("ya_fsdp_v1",),
            "upstream YaFSDP v1 copies each unit's bf16 gradient into its fp32 buffer on its "
            "comm stream (priority -1), between the all-gather and the reduce-scatter there, "
            "and divides the sharded gradient once at the end of backward",
            "yandex/YaFSDP 0bd33e7 ya_fsdp/ya_fsdp.py: _comm_stream (priority=-1), "
            "get_buffer_to_reduce_scatter (copy_), reduce_scatter_grad, the backward hook's "
            "div_(divider)",
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
        Mechanism(
            "slowest_rank_per_link",
            ALL_ENGINES,
            "the slowest rank at every link of a chain: each later link of equal priority "
            "races the compute kernel pending with it, so a collective waits the expected "
            "largest over W ranks of the chain's whole wait, and this rank its expectation",
            "order statistics over W ranks of a uniform first wait plus Bernoulli races "
            "(harness/plan/time/slowest_rank.py); the race-loss probability from the one-GPU "
            "probe where one is given",
        ),
    )
}


def applicable(engine: str) -> list[str]:
    return [name for name, m in MECHANISMS.items() if engine in m.engines]
