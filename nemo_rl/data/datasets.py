"""A prompt iterator whose position is part of the checkpoint, so a resumed run sees the same data."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

__all__ = ["PromptIterator"]

T = TypeVar("T")


class PromptIterator(Generic[T]):
    """Yields batches from ``items`` forever, reshuffled each epoch by ``(seed, epoch)``.

    The whole position is two integers (epoch, index), so ``state_dict()`` is tiny and
    ``load_state_dict()`` continues with exactly the batch that would have come next.
    """

    def __init__(self, items: Sequence[T], seed: int) -> None:
        if not items:
            raise ValueError("PromptIterator needs at least one item")
        self.items = list(items)
        self.seed = seed
        self.epoch = 0
        self.index = 0
        self._order = self._order_for(0)

    def _order_for(self, epoch: int) -> list[int]:
        order = list(range(len(self.items)))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def next_batch(self, n: int) -> list[T]:
        """Returns the next ``n`` items, crossing into the next epoch when this one runs out."""
        batch = []
        while len(batch) < n:
            if self.index == len(self.items):
                self.epoch += 1
                self.index = 0
                self._order = self._order_for(self.epoch)
            batch.append(self.items[self._order[self.index]])
            self.index += 1
        return batch

    def state_dict(self) -> dict[str, Any]:
        """Returns the iterator position: ``{"seed", "epoch", "index"}``."""
        return {"seed": self.seed, "epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a position from ``state_dict()``; raises ``ValueError`` if the seed differs."""
        if state["seed"] != self.seed:
            raise ValueError(f"checkpoint data seed {state['seed']} != configured seed {self.seed}")
        self.epoch = int(state["epoch"])
        self.index = int(state["index"])
        self._order = self._order_for(self.epoch)
