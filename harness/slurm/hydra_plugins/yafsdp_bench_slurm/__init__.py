"""Hydra launcher plugin `hydra/launcher=slurm` of yafsdp-bench (source: harness/slurm/).

Hydra accepts plugin classes only from the `hydra_plugins` namespace package, so this thin
package is installed under that name; the logic lives in `harness.slurm`.
"""
