"""``python -m nemo_rl.telemetry settings CONFIG.yaml [key=value ...]``: the effective settings.

Prints every telemetry setting for that config and the current environment, and where each came
from (``env NEMO_RL_OTEL_...``, ``config telemetry....``, ``default``). Writes nothing. It checks
exactly what a run checks before it starts (:func:`nemo_rl.telemetry.check_telemetry`): a config
or variable the run would refuse is one ``error:`` line naming the file:line:col, key or
variable, and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

import spanspec
from nemo_rl.telemetry.config import RL_FIELDS, TelemetryConfig
from nemo_rl.telemetry.identity import RunIdentity
from nemo_rl.telemetry.lifecycle import check_telemetry
from nemo_rl.utils.config import ConfigError, read_config, validate_config
from spanspec.export import planned_destinations
from spanspec.settings import SENSITIVE_FIELDS, SettingsError, ignored_variables
from spanspec.spec import REDACTED


class _RunFolder(BaseModel):
    model_config = ConfigDict(extra="ignore")

    log_dir: str | None = None


class _TelemetryOnly(BaseModel):
    """A run config as far as telemetry goes (its block, and the run folder its files default
    under): its other sections belong to the algorithm."""

    model_config = ConfigDict(extra="ignore")

    telemetry: TelemetryConfig = TelemetryConfig()
    logger: _RunFolder = _RunFolder()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (0 ok, 2 bad config or env)."""
    parser = argparse.ArgumentParser(prog="python -m nemo_rl.telemetry")
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("settings", help="print the effective telemetry settings")
    show.add_argument("config", nargs="?", help="run config YAML (omit for env and defaults only)")
    show.add_argument("overrides", nargs="*", help="config overrides, e.g. telemetry.exporter=otlp")
    show.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.config is not None and "=" in args.config and not Path(args.config).exists():
        # `settings telemetry.exporter=otlp`: overrides of the env and defaults, no config file
        args.overrides, args.config = [args.config, *args.overrides], None

    try:
        config: Any = read_config(args.config, args.overrides)
        run = validate_config(config, _TelemetryOnly)  # the run's messages: "telemetry.x: ..."
        identity = RunIdentity(algorithm="", run_dir=run.logger.log_dir)
        settings, spec, _ = check_telemetry(run.telemetry, identity)
    except (ConfigError, SettingsError, spanspec.SpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:  # not reached: validate_config turns these into ConfigError
        print(f"error: {exc.errors()[0]['msg']}", file=sys.stderr)
        return 2
    try:
        destinations = planned_destinations(settings)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for var in ignored_variables(conventions=spec.conventions, fields=RL_FIELDS):
        print(f"warning: {var}: not a setting here, ignored", file=sys.stderr)
    if args.json:
        rows: dict[str, Any] = {
            name: {
                "value": REDACTED if name in SENSITIVE_FIELDS and value is not None else value,
                "source": source,
            }
            for name, value, source in settings.items()
        }
        print(json.dumps({"settings": rows, "destinations": destinations}, indent=2))
    else:
        print(settings.format_table())
        print("\nwhere each signal goes:")
        for signal_name, entries in destinations.items():
            print(f"  {signal_name:8} {'; '.join(entries) if entries else 'off'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
