"""CPU a run's processes spend before they do any work: with and without what they skip, side by side.

    python bench/bench_startup.py [--repeats 3]

Two rows, each a fresh process measured by its own CPU seconds (user + system, from
``getrusage`` of the finished child), median of the repeats, alternating:

- ``build_model``: a process that builds the built-in tiny Llama, as every policy, generation
  and teacher worker does; ``skipped`` is nemo_rl as it is (transformers is told scikit-learn
  and SciPy are absent, ``nemo_rl.models.pretrained.without_sklearn_and_scipy``), ``imported``
  the same with that call made a no-op (both imported, as transformers does when MLflow
  installed them). Equal where neither is installed.
- ``count_params``: the driver's start-up line and job span count the built-in model's
  parameters; ``skipped`` computes them from its shape (``model_parameter_count``), ``imported``
  builds the model on the meta device for it, as the driver did (transformers' model classes).
- ``reaper``: the process every local cluster starts to end its processes after a kill -9;
  ``skipped`` is how it is started (by path, ``-I -S``: the standard library only), ``imported``
  the ``python -m nemo_rl.distributed.ray_reaper`` it was (the package's imports: Ray, torch).
  Its driver pid is already gone, so it finds nothing and exits after its one-second wait.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAPER = ROOT / "nemo_rl" / "distributed" / "ray_reaper.py"
BUILD = (
    "import nemo_rl.models.pretrained as p{patch}\n"
    "from nemo_rl.models.causal_lm import ModelConfig, build_model\n"
    "build_model('tiny-llama', ModelConfig(), 40, 0)\n"
)
COUNT = (
    "from nemo_rl.models.causal_lm import (\n"
    "    ModelConfig, build_model, model_parameter_count, parameter_count)\n"
    "MODEL = ('tiny-llama', ModelConfig(), 40)\n"
    "print({count})\n"
)


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


CASES = {
    "build_model": {
        "skipped": _python(BUILD.format(patch="")),
        "imported": _python(BUILD.format(patch="; p.without_sklearn_and_scipy = lambda: None")),
    },
    "count_params": {
        "skipped": _python(COUNT.format(count="model_parameter_count(*MODEL)")),
        "imported": _python(
            COUNT.format(count="parameter_count(build_model(*MODEL, 0, meta=True))")
        ),
    },
    "reaper": {
        "skipped": [sys.executable, "-I", "-S", str(REAPER), "999999999", "bench-none"],
        "imported": [
            sys.executable,
            "-m",
            "nemo_rl.distributed.ray_reaper",
            "999999999",
            "bench-none",
        ],
    },
}


def cpu_seconds(command: list[str]) -> float:
    """CPU seconds (user + system) of ``command`` run to its end from the repo root."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'process':<12} {'skipped cpu s':>14} {'imported cpu s':>15} {'saved':>7}")
    for name, modes in CASES.items():
        seconds = {mode: [] for mode in modes}
        for _ in range(args.repeats):
            for mode, command in modes.items():
                seconds[mode].append(cpu_seconds(command))
        skipped, imported = (statistics.median(seconds[m]) for m in ("skipped", "imported"))
        print(f"{name:<12} {skipped:>14.2f} {imported:>15.2f} {1 - skipped / imported:>6.0%}")


if __name__ == "__main__":
    main()
