"""Who a run is: the one object both the job span's attributes and every process's resource come
from, so the two cannot say different things."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanspec.settings import Settings

__all__ = ["RunIdentity"]


@dataclass(frozen=True)
class RunIdentity:
    """The run as the entry point knows it once its config is validated."""

    algorithm: str
    """The loop (``grpo``, ``sft``, ...): ``rl.algorithm``."""
    model: str | None = None
    """The trained model's name: ``rl.model``."""
    run_dir: str | None = None
    """The run folder (``logger.log_dir``): telemetry files go under it by default, and its name
    is the run's project in a backend unless ``telemetry.project`` says otherwise."""
    max_steps: int | None = None
    """The steps the run is configured for: ``rl.max_steps`` on the job span."""
    inputs: Mapping[str, Any] = field(default_factory=dict)
    """What the run trains on beyond its model's name: its size and its data
    (``rl.num_parameters``, ``rl.data.*``: ``RunInputs.attributes()``), on the resource and the
    job span alike."""

    def run_folder(self, run_id: str) -> Path:
        """Returns the run folder, ``runs/<run_id>`` when the run names none."""
        return Path(self.run_dir) if self.run_dir else Path("runs") / run_id

    def resource(self, settings: Settings) -> dict[str, Any]:
        """Returns the resource attributes every process of the run carries (None values left
        out): algorithm, model, run id, and the project under the names backends read."""
        attributes = {
            "rl.algorithm": self.algorithm,
            "rl.model": self.model,
            "rl.run_id": settings.run_id,
            # Phoenix keeps only this resource attribute (its project); others read service.namespace.
            "openinference.project.name": settings.project,
            "service.namespace": settings.project,
            **self.inputs,
        }
        return {k: v for k, v in attributes.items() if v is not None}

    def job_attributes(self, settings: Settings) -> dict[str, Any]:
        """Returns the attributes of the loop's ``rl.<algo>.job`` span; ``enduser.id`` only when
        ``user_id`` is set (opt-in, and sensitive: the registry redacts its value)."""
        attributes: dict[str, Any] = {
            "rl.algorithm": self.algorithm,
            "rl.max_steps": self.max_steps,
            "rl.model": self.model,
            "rl.run_id": settings.run_id or "",
            "enduser.id": settings.user_id,
            **self.inputs,
        }
        return {k: v for k, v in attributes.items() if v is not None}
