"""Synthetic datasets, the tokenizer, collate functions and supervised / preference batches."""

from nemo_rl.data.collate import left_pad, right_pad
from nemo_rl.data.datasets import PromptIterator
from nemo_rl.data.pairs import (
    PreferencePair,
    encode_completions,
    encode_preference_pairs,
    make_preference_pairs,
    stack_pair_sides,
)
from nemo_rl.data.tokenizer import CharTokenizer

__all__ = [
    "CharTokenizer",
    "PreferencePair",
    "PromptIterator",
    "encode_completions",
    "encode_preference_pairs",
    "left_pad",
    "make_preference_pairs",
    "right_pad",
    "stack_pair_sides",
]
