"""Datasets (JSONL files, and the built-in task's order), tokenizers, collate functions and
supervised / preference batches."""

from nemo_rl.data.collate import left_pad, right_pad
from nemo_rl.data.datasets import PromptIterator
from nemo_rl.data.jsonl import DataConfig, DataError, read_jsonl, write_jsonl
from nemo_rl.data.pairs import (
    PreferencePair,
    encode_completions,
    encode_preference_pairs,
    make_preference_pairs,
    stack_pair_sides,
)
from nemo_rl.data.tokenizer import CharTokenizer, HFTokenizer, Tokenizer, load_tokenizer

__all__ = [
    "CharTokenizer",
    "DataConfig",
    "DataError",
    "HFTokenizer",
    "PreferencePair",
    "PromptIterator",
    "Tokenizer",
    "encode_completions",
    "encode_preference_pairs",
    "left_pad",
    "load_tokenizer",
    "make_preference_pairs",
    "read_jsonl",
    "right_pad",
    "stack_pair_sides",
    "write_jsonl",
]
