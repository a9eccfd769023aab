"""Write a tiny Hugging Face model folder and a small JSONL math set, to try the model-and-data
path in a minute with nothing downloaded:

    python scripts/make_tiny_hf.py                       # writes runs/tiny_hf/
    python examples/run_grpo.py --config examples/configs/grpo_hf.yaml
    python examples/run_sft.py --config examples/configs/sft_hf.yaml

``runs/tiny_hf/tiny-math-llama/`` is a Llama (~0.8M parameters, random weights) with a tokenizer
built by the ``tokenizers`` library, as ``save_pretrained`` writes them; ``math_train.jsonl`` and
``math_val.jsonl`` hold ``{"prompt": "42+7=", "answer": "49"}`` lines.
"""

from __future__ import annotations

import argparse
import os
import sys

from nemo_rl.models.tiny_hf import TINY_MODEL, save_tiny_llama, write_math_set


def main(argv: list[str] | None = None) -> int:
    """Writes the folder and the data under ``OUT``; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="runs/tiny_hf", help="folder to write into")
    parser.add_argument("--seed", type=int, default=0, help="weights and data split")
    args = parser.parse_args(argv)
    model = save_tiny_llama(os.path.join(args.out, TINY_MODEL), seed=args.seed)
    train, val = write_math_set(args.out, seed=args.seed)
    print(f"model: {model}")
    print(f"data:  {train}, {val}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
