"""TRL DPO (or SFT, or a reward model) on a tiny local model, traced with nemo_rl's telemetry:
the callback is the only nemo_rl line.

    python scripts/make_tiny_hf.py                  # runs/tiny_hf/tiny-math-llama, once
    NEMO_RL_OTEL_SPAN_GROUPS=all python examples/trl/dpo.py --output-dir runs/trl_dpo

The preference pairs are sums written in code (nothing is downloaded): the right answer is
chosen, a wrong one rejected. ``examples/trl/sft.py`` trains on the right answers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from datasets import Dataset


def pairs() -> list[dict[str, str]]:
    """Every ``"a+b="`` with a, b < 6: its right answer and a wrong one."""
    return [
        {"prompt": f"{a}+{b}=", "chosen": str(a + b), "rejected": str(a + b + 1)}
        for a in range(6)
        for b in range(6)
    ]


def main(kind: str = "dpo") -> int:
    """Trains ``kind`` (``dpo``, ``sft`` or ``rm``); returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/tiny_hf/tiny-math-llama", help="a local folder")
    parser.add_argument("--output-dir", default=f"runs/trl_{kind}")
    parser.add_argument("--max-steps", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=2)
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

    common = dict(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
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
    rows = pairs()
    if kind == "dpo":
        from trl import DPOConfig, DPOTrainer

        trainer_class, config, model = DPOTrainer, DPOConfig(**common), args.model
    elif kind == "sft":
        from trl import SFTConfig, SFTTrainer

        rows = [{"prompt": r["prompt"], "completion": r["chosen"]} for r in rows]
        trainer_class, config, model = SFTTrainer, SFTConfig(**common), args.model
    else:
        from transformers import AutoModelForSequenceClassification
        from trl import RewardConfig, RewardTrainer

        rows = [
            {"chosen": r["prompt"] + r["chosen"], "rejected": r["prompt"] + r["rejected"]}
            for r in rows
        ]
        model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=1)
        model.config.pad_token_id = model.config.pad_token_id or model.config.eos_token_id
        trainer_class, config = RewardTrainer, RewardConfig(**common)
    data = Dataset.from_list(rows)
    callbacks = []
    if not args.no_telemetry_callback:
        from nemo_rl.integrations.trl import TelemetryCallback

        callbacks.append(TelemetryCallback())
    trainer = trainer_class(
        model=model,
        args=config,
        train_dataset=data,
        eval_dataset=data.select(range(4)) if args.eval_steps else None,
        callbacks=callbacks,
    )
    trainer.train()
    with open(os.path.join(args.output_dir, "log_history.json"), "w") as f:
        json.dump(trainer.state.log_history, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
