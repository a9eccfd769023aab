"""Run GRPO on the tiny arithmetic task, traced, then print where the step time went.

    python examples/run_grpo.py [--config examples/configs/grpo_tiny.yaml] [key=value ...]

Overrides are dotted keys: ``grpo.max_steps=20 telemetry.span_groups=all``.
"""

from __future__ import annotations

import argparse
import os
import sys

import ray

import spanspec
from nemo_rl.algorithms.grpo import MasterConfig, grpo_train, setup, teardown
from nemo_rl.telemetry import init_telemetry_driver, shutdown_telemetry
from nemo_rl.telemetry.breakdown import step_breakdown
from nemo_rl.utils.config import ConfigError, load_config

DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), "configs", "grpo_tiny.yaml")


def main(argv: list[str] | None = None) -> int:
    """Runs the job; returns the process exit code (2 for a bad config)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="YAML run config")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides, MasterConfig)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2

    # Telemetry first: it writes NEMO_RL_OTEL_* for the Ray workers, so it must precede ray.init.
    handle = init_telemetry_driver(cfg, "grpo")
    job_attrs = {
        "rl.algorithm": "grpo",
        "rl.max_steps": cfg.grpo.max_steps,
        "rl.model": cfg.policy.model_name,
        "rl.run_id": handle.settings.run_id or "",
    }
    if handle.settings.user_id:  # opt-in and sensitive: the registry redacts its value
        job_attrs["enduser.id"] = handle.settings.user_id
    with spanspec.span("rl.grpo.job", **job_attrs):
        s = setup(cfg)
        try:
            summary = grpo_train(s)
        finally:
            teardown(s)
    ray.shutdown()
    shutdown_telemetry()

    rewards, validation = summary["rewards"], summary["validation"]
    if rewards:
        k = max(1, min(10, len(rewards) // 4))
        first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
        print(f"mean reward: first {k} steps {first:.3f} -> last {k} steps {last:.3f}")
    if validation:
        print("validation accuracy: " + ", ".join(f"step {st} {acc:.3f}" for st, acc in validation))
    print(f"metrics: {s.logger.path}")
    settings = handle.settings
    trace_file = os.path.join(settings.file_dir, "traces.jsonl")
    if settings.enabled and "file" in settings.exporters and os.path.exists(trace_file):
        print(step_breakdown(trace_file, run_id=settings.run_id))
        print(f"traces: {trace_file}  (view a step: spanspec view {trace_file})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
