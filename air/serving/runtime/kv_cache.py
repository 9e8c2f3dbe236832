"""The key-value cache of transformers, as the generation engine reshapes it: rows joined, left-padded, cut."""

from __future__ import annotations

from typing import Any


def cache_layers(cache) -> list[tuple[Any, Any]]:
    """(keys, values) of each layer, each [rows, heads, length, head size]."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def set_cache_layers(cache, layers: list[tuple[Any, Any]]) -> None:
    for layer, (keys, values) in zip(cache.layers, layers, strict=True):
        layer.keys, layer.values = keys, values


def pad_left(tensor, width: int, dim: int = 2):
    """``tensor`` with zeros before its entries along ``dim`` up to ``width`` (padding the mask ignores)."""
    import torch

    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([torch.zeros(shape, dtype=tensor.dtype), tensor], dim=dim)
