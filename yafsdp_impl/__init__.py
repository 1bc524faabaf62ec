"""A YaFSDP-style sharded data-parallel engine: preallocated buffers, ordered collectives."""

from yafsdp_impl.api import YaFSDP
from yafsdp_impl.layout import is_norm

__all__ = ["YaFSDP", "is_norm"]
