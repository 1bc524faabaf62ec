"""A YaFSDP-style sharded data-parallel engine: preallocated buffers, ordered collectives."""

from yafsdp_impl.api import YaFSDP, byte_classes, held_bytes
from yafsdp_impl.layout import is_norm

__all__ = ["YaFSDP", "byte_classes", "held_bytes", "is_norm"]
