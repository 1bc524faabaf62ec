"""Hydra sweeper plugin `hydra/sweeper=alternating` of yafsdp-bench: Hydra's basic sweeper
with each grid point's engines alternating and every job run `repeats` times (the order is
harness.sweep.order's). Hydra takes plugin classes from the `hydra_plugins` namespace only.
"""
