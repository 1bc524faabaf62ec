"""`make gpu-check` / `python -m harness.gpucheck`: prove the CUDA paths on one GPU.

Suite A: one GPU, NCCL, world size 1 (parity, stream ordering under stress, no hidden host
syncs, steady-state allocations, a real CUDA trace, overlap under an injected delay).
Suite B: 2 and 3 ranks sharing the GPU through gloo (the engines' numerics on CUDA: losses
and gradient norms against `local`, one row per engine and world size).
Suite C: per-rank memory at the published world sizes through the fake process group; on
a machine without CUDA it runs at a reduced size on CPU.
Suite D: the give-way probe (`python -m harness.plan.probe give-way`): a side kernel's wait
for SMs behind the model's GEMMs at stream priority 0 and -1, written as a calibration file.
Suite S: the serial backward's constants (`suite_s`): FSDP1's cat stream and hooks under the
fake process group, the chain's wait distribution, YaFSDP v1's -1 copy, bandwidth
efficiencies and allocator retries at 80 GiB, added to suite D's calibration file.
They run in the order asked (default A, B, D, S, C: `schedule`), each announced with its
estimated GPU minutes; the report is written after every row, and C takes what the run's
deadline leaves. The report and its arithmetic (`check_rows`, `report`, `schedule`,
`judging`, `footprint`) import no torch; the suites do.
"""
