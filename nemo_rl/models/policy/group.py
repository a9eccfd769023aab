"""A policy-like role as N ranks of ``PolicyWorker``: what the loops call for the policy (with its
reference), the value model, the reward model and the distillation teacher.

Each call shards its batch across the ranks and gathers the results in row order; training
shards every global mini-batch (so the ranks' update is the one-rank update on the whole batch,
see :mod:`nemo_rl.models.policy.worker`) and merges the ranks' sums into global metrics. Every
call carries the caller's trace context, so each rank's spans sit under the loop's phase span.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray
import torch

from nemo_rl.distributed import WorkerGroup
from nemo_rl.distributed.batches import concat_rows, split_minibatches, split_rows
from nemo_rl.distributed.worker_group import Placement
from nemo_rl.models.policy.worker import LossFunction, PolicyConfig, PolicyWorker, TrainStats
from nemo_rl.telemetry.resources import peak_flops
from nemo_rl.telemetry.stragglers import watch
from spanspec.export import TelemetryCost

__all__ = ["PolicyGroup", "SharedBatch"]

Batch = dict[str, torch.Tensor]


class SharedBatch:
    """A batch sent to Ray's object store once for each way it is split, so several calls (the
    value model's, the policy's log-probs, then the reference's) read it without sending it
    again, whatever number of ranks each role has."""

    def __init__(self, batch: Batch) -> None:
        self.batch = batch
        self._refs: dict[int, list[Any]] = {}

    def refs(self, parts: int) -> list[Any]:
        """Returns the batch's rows split in ``parts`` (in order), one object-store ref each."""
        if parts not in self._refs:
            self._refs[parts] = [ray.put(p) for p in split_rows(self.batch, parts)]
        return self._refs[parts]


class PolicyGroup:
    """``cfg.num_workers`` ranks of ``PolicyWorker`` for the role ``name``; trained roles join
    one ``torch.distributed`` process group (rendezvous at rank 0 on a free port).

    Raises what ``WorkerGroup`` raises when the ranks cannot be placed or fail to start.
    """

    def __init__(
        self,
        cfg: PolicyConfig,
        vocab_size: int,
        seed: int,
        loss_fn: LossFunction | None,
        temperature: float = 1.0,
        *,
        name: str = "policy",
        reference: bool = True,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        placement: Placement = "pack",
        peak_flops_per_worker: float | None = None,
    ) -> None:
        self.cfg = cfg
        self.peak_flops_per_worker = peak_flops_per_worker
        self._weight_bytes: int | None = None
        self.workers = WorkerGroup(
            PolicyWorker,
            cfg,
            vocab_size,
            seed,
            loss_fn,
            temperature,
            reference,
            name=name,
            num_workers=cfg.num_workers,
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            placement=placement,
        )
        if loss_fn is not None and self.workers.size > 1:  # a trained role averages gradients
            address, port = self.workers.run_first("rendezvous")
            self.workers.run_all("join", address, port)

    @property
    def size(self) -> int:
        """The number of ranks."""
        return self.workers.size

    def train(self, batch: Batch) -> dict[str, float]:
        """One update on ``batch`` (every rank its share of each mini-batch); returns the step's
        metrics over the whole batch (see ``TrainStats.merge``), with ``mfu`` (achieved FLOP/s
        per rank over the rank's peak) where the peak is known.

        With several ranks, each rank's micro-batch time goes to the straggler watch."""
        shards = split_minibatches(batch, self.size, self.cfg.train_global_batch_size)
        stats: Sequence[TrainStats] = self.workers.run_sharded("train", shards)
        watch().observe(
            self.workers.name,
            "rl.worker.train_microbatch",
            [s.busy_s for s in stats],
            self.workers.describe,
        )
        metrics = TrainStats.merge(stats)
        peak = peak_flops(stats[0].device, self.peak_flops_per_worker)
        if peak and "flops_per_sec" in metrics:
            metrics["mfu"] = metrics["flops_per_sec"] / (peak * self.size)
        return metrics

    def get_logprobs(self, batch: Batch | SharedBatch) -> torch.Tensor:
        """``[B, T]`` log-probs of the batch's tokens under the current model."""
        return self._scored("get_logprobs", batch)

    def get_reference_logprobs(self, batch: Batch | SharedBatch) -> torch.Tensor:
        """``[B, T]`` log-probs under the frozen reference."""
        return self._scored("get_reference_logprobs", batch)

    def get_next_token_logprobs(self, batch: Batch | SharedBatch) -> torch.Tensor:
        """``[B, T, V]`` whole next-token distributions (a distillation teacher's)."""
        return self._scored("get_next_token_logprobs", batch)

    def get_values(self, batch: Batch | SharedBatch) -> torch.Tensor:
        """``[B, T]`` per-token scalars of a ``head: scalar`` model."""
        return self._scored("get_values", batch)

    def _scored(self, method: str, batch: Batch | SharedBatch) -> torch.Tensor:
        shared = batch if isinstance(batch, SharedBatch) else SharedBatch(batch)
        rows = self.workers.run_sharded(method, shared.refs(self.size))
        watch().observe(
            self.workers.name, "rl.worker.logprob", self.workers.last_seconds, self.workers.describe
        )
        return concat_rows(rows)

    def state_dict_ref(self) -> Any:
        """Rank 0's weights as an ``ObjectRef`` (every rank holds the same), to hand to the
        generation ranks through the object store without passing through the caller."""
        return self.workers.ref_first("state_dict")

    def weight_bytes(self) -> int:
        """Returns the size of the model's weights in bytes (asked of rank 0 once)."""
        if self._weight_bytes is None:
            self._weight_bytes = int(self.workers.run_first("weight_bytes"))
        return self._weight_bytes

    def save_checkpoint(self, path: str) -> str:
        """Writes the model, optimiser and schedule (rank 0's: every rank holds the same) to
        ``path``; returns the file."""
        return self.workers.run_first("save_checkpoint", path)

    def load_checkpoint(self, path: str) -> None:
        """Restores every rank from ``path``."""
        self.workers.run_all("load_checkpoint", path)

    def save_pretrained(self, path: str) -> str:
        """Writes the model as a Hugging Face folder (rank 0's); returns ``path``."""
        return self.workers.run_first("save_pretrained", path)

    def begin_close(self) -> None:
        """Asks every rank to flush its telemetry, without waiting (:meth:`close` waits)."""
        self.workers.begin_close()

    def close(self) -> list[TelemetryCost]:
        """Flushes every rank's telemetry and stops the ranks; returns their telemetry costs."""
        return [c for c in self.workers.close() if isinstance(c, TelemetryCost)]
