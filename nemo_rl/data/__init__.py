"""Synthetic datasets, the tokenizer and collate functions."""

from nemo_rl.data.collate import left_pad, right_pad
from nemo_rl.data.datasets import PromptIterator
from nemo_rl.data.tokenizer import CharTokenizer

__all__ = ["CharTokenizer", "PromptIterator", "left_pad", "right_pad"]
