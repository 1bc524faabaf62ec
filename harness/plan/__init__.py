"""The planner: per-GPU memory and iteration time of a job before it runs.

`python -m harness.plan <Hydra overrides>` (`cli`) prices every point and engine a sweep would
run (`planner`), and says why (`explain`). Its rooms:
- `memory/`: what each engine holds on a device (no time model);
- `time/`: kernels, network, each engine's program (`time/programs/`), the stream simulator;
- `calibrate/`: calibration files, the one-GPU probes, the public runs it is checked against;
- `probe/`: one layer of the job's model run on fake tensors (bytes and kernels), cached.
"""
