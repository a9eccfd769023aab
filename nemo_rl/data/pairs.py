"""Supervised and preference data built from prompt/answer problems, and its token batches.

SFT trains on ``prompt -> answer``; DPO and reward models on preference pairs whose chosen
completion is the right answer and whose rejected one is a wrong sum, drawn per problem from
near misses (a ones digit off, a tens digit off, both). Every batch here is right-padded: row
``i`` is ``<bos> prompt completion <eos>``, and ``response_mask`` marks the completion and its
eos, the tokens a loss is taken over.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from nemo_rl.data.collate import right_pad
from nemo_rl.data.tokenizer import Tokenizer

__all__ = [
    "PAIR_SIDES",
    "PreferencePair",
    "encode_completions",
    "encode_preference_pairs",
    "make_preference_pairs",
    "stack_pair_sides",
]

PAIR_SIDES = ("chosen", "rejected")
"""The two halves of a preference batch: its keys are ``<side>_input_ids`` and so on."""


class _Problem(Protocol):
    prompt: str
    answer: str


@dataclass(frozen=True)
class PreferencePair:
    """A prompt with a preferred (chosen) and a dispreferred (rejected) completion."""

    prompt: str
    chosen: str
    rejected: str


def make_preference_pairs(
    problems: Sequence[_Problem], seed: int, per_problem: int = 1
) -> list[PreferencePair]:
    """Returns ``per_problem`` pairs for each problem: chosen is its answer, rejected a wrong sum.

    The wrong sums are the answer plus an offset from -10..10 (never 0, never below 0): a ones
    digit off by a little or a lot, a tens digit off, or both. They are drawn by ``(seed,
    prompt)``, so the same seed gives the same pairs whatever order the problems come in, and
    the ``per_problem`` wrong sums of one problem differ. Raises ``ValueError`` for a
    non-numeric answer or a ``per_problem`` above the 10 wrong sums every answer has.
    """
    if not 1 <= per_problem <= 10:
        raise ValueError(f"per_problem={per_problem}: expected 1..10")
    pairs = []
    for p in problems:
        if not p.answer.isdigit():
            raise ValueError(f"{p.prompt!r}: answer {p.answer!r} is not a number")
        right = int(p.answer)
        wrong = [right + d for d in range(-10, 11) if d and right + d >= 0]
        for w in random.Random(f"{seed}:{p.prompt}").sample(wrong, per_problem):
            pairs.append(PreferencePair(p.prompt, p.answer, str(w)))
    return pairs


def encode_completions(
    tok: Tokenizer, prompts: Sequence[str], completions: Sequence[str]
) -> dict[str, torch.Tensor]:
    """Returns the right-padded ``input_ids``, ``attention_mask`` and ``response_mask`` (``[B, T]``).

    Row ``i`` is ``<bos> prompts[i] completions[i] <eos>``; ``response_mask`` is 1 on the
    completion and its eos.
    """
    rows, starts = [], []
    for prompt, completion in zip(prompts, completions, strict=True):
        head = tok.encode(prompt, add_bos=True)
        rows.append(head + tok.encode(completion, add_eos=True))
        starts.append(len(head))
    ids, mask = right_pad(rows, tok.pad_token_id)
    columns = torch.arange(ids.shape[1])[None, :]
    response = (columns >= torch.tensor(starts)[:, None]).long() * mask
    return {"input_ids": ids, "attention_mask": mask, "response_mask": response}


def encode_preference_pairs(
    tok: Tokenizer, pairs: Sequence[PreferencePair]
) -> dict[str, torch.Tensor]:
    """Returns one row per pair: ``chosen_*`` and ``rejected_*`` batches of :func:`encode_completions`.

    Both sides share one width, so :func:`stack_pair_sides` can run them as one batch.
    """
    prompts = [p.prompt for p in pairs]
    sides = {
        "chosen": encode_completions(tok, prompts, [p.chosen for p in pairs]),
        "rejected": encode_completions(tok, prompts, [p.rejected for p in pairs]),
    }
    width = max(b["input_ids"].shape[1] for b in sides.values())
    return {
        f"{side}_{key}": torch.nn.functional.pad(value, (0, width - value.shape[1]))
        for side, batch in sides.items()
        for key, value in batch.items()
    }


def stack_pair_sides(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Returns the pair batch as one ``[2B, T]`` batch: the chosen rows, then the rejected rows.

    Keys lose their side prefix (``chosen_input_ids`` and ``rejected_input_ids`` become
    ``input_ids``); the first ``B`` rows are the chosen ones.
    """
    keys = {k.removeprefix("chosen_") for k in batch if k.startswith("chosen_")}
    return {k: torch.cat([batch[f"{side}_{k}"] for side in PAIR_SIDES]) for k in sorted(keys)}
