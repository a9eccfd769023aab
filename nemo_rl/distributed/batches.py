"""Splitting a batch (a dict of tensors with the rows on their first dimension) across ranks,
and putting the ranks' results back together in row order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

import torch

__all__ = ["concat_rows", "num_rows", "split_minibatches", "split_rows"]

Batch = Mapping[str, torch.Tensor]
T = TypeVar("T", torch.Tensor, dict)


def num_rows(batch: Batch) -> int:
    """Returns the rows (sequences, or pairs) of ``batch``."""
    return len(next(iter(batch.values())))


def split_rows(batch: Batch, parts: int) -> list[dict[str, torch.Tensor]]:
    """Returns ``batch`` cut into ``parts`` contiguous slices of rows, in order, as even as can
    be (the first slices one row longer when ``parts`` does not divide the rows)."""
    bounds = _bounds(num_rows(batch), parts)
    return [{k: v[a:b] for k, v in batch.items()} for a, b in bounds]


def split_minibatches(batch: Batch, parts: int, minibatch: int) -> list[dict[str, torch.Tensor]]:
    """Returns rank ``r``'s rows for data-parallel training: of every mini-batch of
    ``minibatch`` rows (the last may be shorter), its ``r``-th slice, mini-batches in order.

    So rank ``r`` trained in local mini-batches of ``minibatch / parts`` rows sees, step by
    step, its part of the same global mini-batch as every other rank. Raises ``ValueError``
    when ``parts`` does not divide a mini-batch (the config check says so first).
    """
    rows = num_rows(batch)
    pieces: list[list[slice]] = [[] for _ in range(parts)]
    for start in range(0, rows, minibatch):
        size = min(minibatch, rows - start)
        if size % parts:
            raise ValueError(f"a mini-batch of {size} rows does not split into {parts} ranks")
        share = size // parts
        for r in range(parts):
            pieces[r].append(slice(start + r * share, start + (r + 1) * share))
    return [{k: torch.cat([v[s] for s in slices]) for k, v in batch.items()} for slices in pieces]


def concat_rows(parts: Sequence[T]) -> T:
    """Returns the ranks' results (tensors, or dicts of tensors) joined along the rows, in order."""
    first = parts[0]
    if isinstance(first, dict):
        return {k: torch.cat([p[k] for p in parts]) for k in first}  # type: ignore[return-value]
    return torch.cat(list(parts))  # type: ignore[return-value]


def _bounds(rows: int, parts: int) -> list[tuple[int, int]]:
    base, extra = divmod(rows, parts)
    out, start = [], 0
    for r in range(parts):
        end = start + base + (1 if r < extra else 0)
        out.append((start, end))
        start = end
    return out
