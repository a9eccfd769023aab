"""Generation as N ranks: each samples its share of the step's prompts, with a seed of its own,
and every rank gets the new weights from the object store after each update.

Rows are split in order, as evenly as can be; the rollout loops keep a prompt's group of samples
on one rank (the config check makes ``num_workers`` divide the prompts). Rank ``r`` samples with
:func:`rank_seed` of the step's seed: the same run on the same number of ranks samples alike,
and a group of one samples exactly as a single worker does.
"""

from __future__ import annotations

from typing import Any

import torch

from nemo_rl.distributed import WorkerGroup
from nemo_rl.distributed.batches import concat_rows, split_rows
from nemo_rl.distributed.worker_group import Placement
from nemo_rl.models.generation.interface import GenerationOutput
from nemo_rl.telemetry.stragglers import watch
from spanspec.export import TelemetryCost

__all__ = ["GenerationGroup", "rank_seed"]


def rank_seed(seed: int, rank: int) -> int:
    """Returns rank ``rank``'s sampling seed for a step seeded ``seed`` (``seed`` itself on rank 0)."""
    return seed + rank * 1_000_000_007


class GenerationGroup:
    """``num_workers`` ranks of a generation backend (``TorchGeneration`` or ``VllmGeneration``,
    built as ``backend(*args, info=...)``)."""

    def __init__(
        self,
        backend: type,
        *args: Any,
        num_workers: int = 1,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        placement: Placement = "pack",
        name: str = "generation",
    ) -> None:
        self.phase = backend.generate_span  # the straggler watch names a slow rank in it
        self.workers = WorkerGroup(
            backend,
            *args,
            name=name,
            num_workers=num_workers,
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            placement=placement,
        )

    @property
    def size(self) -> int:
        """The number of ranks."""
        return self.workers.size

    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        greedy: bool = False,
        seed: int | None = None,
    ) -> GenerationOutput:
        """Returns responses to the left-padded prompts, rank ``r`` sampling its share with
        ``rank_seed(seed, r)``; see ``GenerationInterface.generate``.

        With several ranks that all had prompts, each rank's time to answer goes to the
        straggler watch."""
        shards = [
            s
            for s in split_rows(
                {"input_ids": input_ids, "attention_mask": attention_mask}, self.size
            )
            if len(s["input_ids"])
        ]
        refs = [
            self.workers.call(
                rank,
                "generate",
                s["input_ids"],
                s["attention_mask"],
                greedy=greedy,
                seed=None if seed is None else rank_seed(seed, rank),
            )
            for rank, s in enumerate(shards)
        ]
        rows = self.workers.gather(refs, "generate")
        if len(refs) == self.size:
            watch().observe(
                self.workers.name, self.phase, self.workers.last_seconds, self.workers.describe
            )
        return concat_rows(rows)

    def update_weights(self, state_dict: Any) -> int:
        """Loads the policy's weights (a dict, or an ``ObjectRef`` to one: then each rank reads it
        from the object store) on every rank; returns the bytes all ranks received."""
        return sum(self.workers.run_all("update_weights", state_dict))

    def begin_close(self) -> None:
        """Asks every rank to flush its telemetry, without waiting (:meth:`close` waits)."""
        self.workers.begin_close()

    def close(self) -> list[TelemetryCost]:
        """Flushes every rank's telemetry and stops the ranks; returns their telemetry costs."""
        return [c for c in self.workers.close() if isinstance(c, TelemetryCost)]
