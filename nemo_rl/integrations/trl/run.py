"""Run an unmodified TRL training script with nemo_rl's telemetry: no code change.

    python -m nemo_rl.integrations.trl.run train.py --its --own args
    nemo-rl-trl train.py --its --own args                     # the same, as a console script

Every ``transformers.Trainer`` the script builds (TRL's trainers are ones) gets a
:class:`~nemo_rl.integrations.trl.TelemetryCallback` appended, unless it already has one; then
the script runs as ``__main__`` with its own arguments (``runpy.run_path``). Settings come from
the ``NEMO_RL_OTEL_*`` variables, checked here first: a bad one, or a script that is not there,
exits 2 with one line before anything trains. A trainer the callback does not know is one warning
line at ``train()``, and that trainer runs untraced.
"""

from __future__ import annotations

import functools
import os
import runpy
import sys
from collections.abc import Sequence

__all__ = ["EXIT_BAD_INPUT", "inject", "main"]

EXIT_BAD_INPUT = 2
USAGE = "usage: python -m nemo_rl.integrations.trl.run SCRIPT [ARGS...]"


def inject() -> None:
    """Patches ``transformers.Trainer.__init__`` so that every trainer built from now on in this
    process carries a ``TelemetryCallback`` (one: a trainer given its own keeps it). Idempotent."""
    from transformers import Trainer

    from nemo_rl.integrations.trl.callback import TelemetryCallback

    original = Trainer.__init__
    if getattr(original, "_nemo_rl_telemetry", False):
        return

    @functools.wraps(original)
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        callbacks = self.callback_handler.callbacks
        if not any(isinstance(c, TelemetryCallback) for c in callbacks):
            self.add_callback(TelemetryCallback())

    __init__._nemo_rl_telemetry = True  # type: ignore[attr-defined]
    Trainer.__init__ = __init__  # type: ignore[method-assign]


def check_settings() -> str | None:
    """Returns why the ``NEMO_RL_OTEL_*`` settings cannot run (one line), or None when they can.

    The same checks as a nemo_rl run's start-up (:func:`~nemo_rl.telemetry.check_telemetry`):
    malformed values, unknown span groups, an unwritable ``file_dir``.
    """
    from nemo_rl.telemetry import TelemetryConfig, check_telemetry
    from spanspec.findings import SpecError
    from spanspec.settings import SettingsError

    try:
        check_telemetry(TelemetryConfig())
    except SettingsError as exc:
        return "; ".join(exc.problems)
    except SpecError as exc:
        return str(exc)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``argv[0]`` (a script) with ``argv[1:]`` as its arguments, traced; returns the exit
    code (2: no script, or a bad setting; otherwise the script's own)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + (__doc__ or "").strip().splitlines()[0], file=sys.stderr)
        return 0 if argv else EXIT_BAD_INPUT
    script = argv[0]
    if not os.path.isfile(script):
        print(f"error: {script}: no such script ({USAGE})", file=sys.stderr)
        return EXIT_BAD_INPUT
    problem = check_settings()
    if problem is not None:
        print(f"error: telemetry: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    inject()
    # As `python script.py args` would: its folder first on the path, its own argv.
    sys.argv = [script, *argv[1:]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
