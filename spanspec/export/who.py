"""Who exports: one process per node, every rank, or a sample of ranks (``export_strategy``)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from pathlib import Path

from spanspec.settings import Settings, SettingsError

# -- who exports ------------------------------------------------------------------------------


def _local_rank(local_rank: int | None) -> int | None:
    if local_rank is not None:
        return local_rank
    for var in ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"):
        text = os.environ.get(var, "").strip()
        if text.isdigit():
            return int(text)
    return None


_node_claims: dict[str, int] = {}


def _claim_node(run_id: str | None) -> bool:
    """First process of this run on this host to take an exclusive lock wins (held until exit)."""
    key = hashlib.sha1(f"{run_id or 'no-run-id'}".encode()).hexdigest()[:16]
    if key in _node_claims:
        return True
    path = Path(tempfile.gettempdir()) / f"spanspec-export-{key}.lock"
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _node_claims[key] = fd
    return True


def _unit_hash(*parts: object) -> float:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def should_export(
    settings: Settings,
    rank: int,
    world_size: int = 1,
    *,
    local_rank: int | None = None,
    worker_group: str = "",
) -> bool:
    """Return whether the process of ``rank`` exports, by ``settings.export_strategy``:

    - ``single_rank``: only ``rank == export_rank``;
    - ``all_ranks``: every rank;
    - ``first_rank_per_node``: the process whose local rank is 0 (``local_rank``, else
      ``$LOCAL_RANK`` / ``$SLURM_LOCALID``; without either, the first process of the run on the
      host to take a lock file);
    - ``sampled``: ``export_rank`` plus a stable pseudo-random ``export_sample_rate`` share of
      the ranks (the same ranks for the same ``run_id``).

    Disabled settings, or no exporter at all, export nowhere.
    """
    if not settings.enabled or not settings.exporters:
        return False
    strategy = settings.export_strategy
    if strategy == "all_ranks":
        return True
    if strategy == "single_rank":
        return rank == settings.export_rank
    if strategy == "first_rank_per_node":
        local = _local_rank(local_rank)
        return local == 0 if local is not None else _claim_node(settings.run_id)
    if strategy == "sampled":
        if rank == settings.export_rank:
            return True
        return _unit_hash(settings.run_id, worker_group, rank) < settings.export_sample_rate
    raise SettingsError([f"export_strategy={strategy!r}: unknown strategy"])
