"""Step checkpoints on disk: ``<dir>/step_<n>/`` holding the policy's files and ``trainer_state.json``.

A checkpoint is written into ``tmp_step_<n>/`` and renamed when complete, so a crash mid-write
never leaves a folder that looks finished.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict

__all__ = ["CheckpointConfig", "CheckpointManager", "get_rng_state", "set_rng_state"]

_STEP_DIR = re.compile(r"^step_(\d+)$")


class CheckpointConfig(BaseModel):
    """When and where checkpoints are written."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    """Write checkpoints and resume from the latest one."""
    checkpoint_dir: str | None = None
    """Folder of the step checkpoints; default ``<logger.log_dir>/checkpoints``."""
    save_period: int = 50
    """Write a checkpoint after every this many steps (and after the last step)."""
    keep: int = 2
    """How many of the newest checkpoints to keep."""


class CheckpointManager:
    """Lists, starts, finishes and prunes the step checkpoints under ``root``."""

    def __init__(self, root: str, keep: int = 2) -> None:
        self.root = os.path.abspath(root)
        self.keep = keep

    def latest(self) -> str | None:
        """Returns the folder of the newest complete checkpoint, or None if there is none."""
        steps = self._steps()
        return os.path.join(self.root, f"step_{steps[-1]}") if steps else None

    def begin(self, step: int) -> str:
        """Returns an empty temporary folder for the checkpoint of ``step``."""
        tmp = os.path.join(self.root, f"tmp_step_{step}")
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        return tmp

    def finish(self, tmp: str, step: int, trainer_state: dict[str, Any]) -> str:
        """Writes ``trainer_state.json`` into ``tmp``, renames it to ``step_<step>``; returns that path.

        Older checkpoints beyond ``keep`` are removed.
        """
        with open(os.path.join(tmp, "trainer_state.json"), "w", encoding="utf-8") as f:
            json.dump(trainer_state, f, indent=1)
        final = os.path.join(self.root, f"step_{step}")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for old in self._steps()[: -self.keep]:
            shutil.rmtree(os.path.join(self.root, f"step_{old}"), ignore_errors=True)
        return final

    @staticmethod
    def load_trainer_state(path: str) -> dict[str, Any]:
        """Returns the ``trainer_state.json`` of checkpoint ``path``; raises ``FileNotFoundError``."""
        with open(os.path.join(path, "trainer_state.json"), encoding="utf-8") as f:
            return json.load(f)

    def _steps(self) -> list[int]:
        if not os.path.isdir(self.root):
            return []
        found = []
        for name in os.listdir(self.root):
            m = _STEP_DIR.match(name)
            if m and os.path.exists(os.path.join(self.root, name, "trainer_state.json")):
                found.append(int(m.group(1)))
        return sorted(found)


def get_rng_state() -> dict[str, Any]:
    """Returns the driver's Python and torch RNG states in a JSON-friendly form."""
    version, state, gauss = random.getstate()
    return {
        "python": [version, list(state), gauss],
        "torch": torch.get_rng_state().tolist(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restores the RNG states written by ``get_rng_state``."""
    version, values, gauss = state["python"]
    random.setstate((version, tuple(values), gauss))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
