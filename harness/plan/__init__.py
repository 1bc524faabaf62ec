"""The planner: per-GPU memory and iteration time of a job before it runs.

`python -m harness.plan <Hydra overrides>`; see `harness.plan.cli`.
"""
