"""``python -m nemo_rl.telemetry settings CONFIG.yaml [key=value ...]``: the effective settings.

Prints every telemetry setting for that config and the current environment, and where each came
from (``env NEMO_RL_OTEL_...``, ``config telemetry....``, ``default``). Writes nothing. Exit code 2
on a malformed config or variable, or a group expression the registry does not know, with the
message.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

import spanspec
from nemo_rl.telemetry.lifecycle import resolve_settings
from spanspec.export import planned_destinations
from spanspec.settings import SettingsError


def _load_config(path: str, overrides: Sequence[str]) -> Any:
    from omegaconf import OmegaConf

    config = OmegaConf.load(path)
    if overrides:
        config = OmegaConf.merge(config, OmegaConf.from_dotlist(list(overrides)))
    return OmegaConf.to_container(config, resolve=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (0 ok, 2 bad config or env)."""
    parser = argparse.ArgumentParser(prog="python -m nemo_rl.telemetry")
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("settings", help="print the effective telemetry settings")
    show.add_argument("config", nargs="?", help="run config YAML (omit for env and defaults only)")
    show.add_argument("overrides", nargs="*", help="config overrides, e.g. telemetry.exporter=otlp")
    show.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)

    try:
        config = _load_config(args.config, args.overrides) if args.config else {}
        settings, _ = resolve_settings(config)
        spanspec.load().resolve(settings.span_groups)  # as init_telemetry_driver checks it
    except (ValidationError, SettingsError, spanspec.SpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        destinations = planned_destinations(settings)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        rows: dict[str, Any] = {
            name: {"value": value, "source": source} for name, value, source in settings.items()
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
