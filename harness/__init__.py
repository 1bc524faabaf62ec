"""yafsdp-bench: compare a YaFSDP-style engine with PyTorch FSDP on Llama-class training.

Importing this package imports no torch: the report and the config code run without it.
"""
