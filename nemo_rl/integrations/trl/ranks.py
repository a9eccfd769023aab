"""Several processes (``accelerate launch``, ``torchrun``): every rank traces, as one lane.

A TRL run on N processes is N equal ranks of one worker group, ``trainer``: each exports with
``rl.worker.group`` ``trainer`` and its ``rl.worker.rank`` on its resource (so the readers' rank
views compare them, as they compare nemo_rl's policy ranks), and all with the run id rank 0
chose. What they agree on goes through :class:`Ranks`, a gloo process group of its own beside
the trainer's (gloo also where the trainer's group is NCCL: the objects sent are a few bytes):

- at train begin, rank 0 starts telemetry and broadcasts the settings it resolved (the
  ``NEMO_RL_OTEL_*`` variables and the job's resource); the others start from them, then every
  rank says whether it started (``all_gather_object``): if one did not, all go off, so no later
  collective of ours can leave a rank waiting;
- at each step's begin, rank 0 opens ``rl.<algo>.step`` and broadcasts its W3C trace context;
  the other ranks' phase spans are its children, so a step is one trace across the ranks;
- at train end, every rank flushes, then they gather their telemetry costs: rank 0 prints the
  whole run's cost and reads every rank's spans for the summary.

Only when telemetry is on here and ``torch.distributed`` runs with more than one process; off,
or in one process, none of this runs (no group, no collective).
"""

from __future__ import annotations

from typing import Any

__all__ = ["GROUP", "Ranks", "world"]

GROUP = "trainer"
"""The worker group (``rl.worker.group``) of a TRL run's ranks."""


def world() -> tuple[int, int] | None:
    """``(rank, world size)`` of this process when ``torch.distributed`` is initialised with more
    than one process, else None."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    size = dist.get_world_size()
    return (dist.get_rank(), size) if size > 1 else None


class Ranks:
    """The run's collectives over a gloo group of every rank; built by every rank at once
    (``new_group`` is itself a collective of the default group)."""

    def __init__(self, rank: int, world_size: int) -> None:
        import torch.distributed as dist

        self.rank, self.world_size = rank, world_size
        self._group = dist.new_group(backend="gloo")

    @property
    def is_first(self) -> bool:
        """Whether this is rank 0, the rank that decides and holds the job and step spans."""
        return self.rank == 0

    def broadcast(self, value: Any = None) -> Any:
        """Rank 0's ``value``, on every rank (the others' ``value`` is ignored)."""
        import torch.distributed as dist

        box = [value if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0, group=self._group)
        return box[0]

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order, on every rank."""
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, value, group=self._group)
        return out

    def close(self) -> None:
        """Lets the group go (every rank, at the end; nothing more is sent over it)."""
        import torch.distributed as dist

        group, self._group = self._group, None
        if group is not None:
            try:
                dist.destroy_process_group(group)
            except Exception:  # the default group may already be gone at the end of a run
                pass
