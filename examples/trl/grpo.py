"""TRL GRPO on a tiny local model, traced with nemo_rl's telemetry: the callback is the only
nemo_rl line.

    python scripts/make_tiny_hf.py                  # runs/tiny_hf/tiny-math-llama, once
    NEMO_RL_OTEL_SPAN_GROUPS=all python examples/trl/grpo.py --output-dir runs/trl_grpo
    spanspec view runs/trl_grpo/telemetry/traces.jsonl --step 2

``--no-telemetry-callback`` builds the trainer without it, as an unmodified TRL script would be;
``python -m nemo_rl.integrations.trl.run examples/trl/grpo.py --no-telemetry-callback`` then
traces it with no code change. The prompts are sums written in code (nothing is downloaded);
two reward functions score each completion: the right answer, and a short one.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer


def sums(n: int, seed: int) -> Dataset:
    """``n`` prompts ``"a+b="`` with their ``answer``."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randrange(10), rng.randrange(10)
        rows.append({"prompt": f"{a}+{b}=", "answer": str(a + b)})
    return Dataset.from_list(rows)


def correct(completions: list[str], answer: list[str], **kwargs: object) -> list[float]:
    """1 for a completion that starts with the right sum, else 0."""
    return [
        1.0 if c.strip().startswith(a) else 0.0 for c, a in zip(completions, answer, strict=True)
    ]


def short(completions: list[str], **kwargs: object) -> list[float]:
    """Shorter is better: minus the completion's length over 8 characters."""
    return [-len(c) / 8 for c in completions]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/tiny_hf/tiny-math-llama", help="a local folder")
    parser.add_argument("--output-dir", default="runs/trl_grpo")
    parser.add_argument("--max-steps", type=int, default=3)
    parser.add_argument("--num-generations", type=int, default=2)
    parser.add_argument("--max-completion-length", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4, help="completions per step")
    parser.add_argument("--beta", type=float, default=0.04, help="KL coefficient (0: no reference)")
    parser.add_argument("--save-steps", type=int, default=0, help="0: no checkpoints")
    parser.add_argument("--eval-steps", type=int, default=0, help="0: no evaluation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-telemetry-callback", action="store_true")
    args = parser.parse_args()
    if not os.path.isdir(args.model):
        print(
            f"error: {args.model}: no model folder (python scripts/make_tiny_hf.py)",
            file=sys.stderr,
        )
        return 2

    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        beta=args.beta,
        logging_steps=1,
        save_strategy="steps" if args.save_steps else "no",
        save_steps=args.save_steps or 500,
        eval_strategy="steps" if args.eval_steps else "no",
        eval_steps=args.eval_steps or None,
        report_to=[],
        use_cpu=True,
        seed=args.seed,
        disable_tqdm=True,
    )
    callbacks = []
    if not args.no_telemetry_callback:
        from nemo_rl.integrations.trl import TelemetryCallback

        callbacks.append(TelemetryCallback())
    trainer = GRPOTrainer(
        model=args.model,
        reward_funcs=[correct, short],
        args=config,
        train_dataset=sums(32, args.seed),
        eval_dataset=sums(args.batch_size, args.seed + 1) if args.eval_steps else None,
        callbacks=callbacks,
    )
    trainer.train()
    # What TRL logged, step by step: to compare runs (losses, tokens) without parsing stdout.
    with open(os.path.join(args.output_dir, "log_history.json"), "w") as f:
        json.dump(trainer.state.log_history, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
