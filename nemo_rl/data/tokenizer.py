"""A character-level tokenizer for the arithmetic task, built in code (nothing is downloaded)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["CharTokenizer"]

_SPECIALS = ("<pad>", "<bos>", "<eos>")
_ARITHMETIC_CHARS = "0123456789+="


class CharTokenizer:
    """Maps each character of a fixed alphabet to one token id; ids 0-2 are pad, bos and eos.

    The alphabet is small on purpose: a tiny model learns faster when its output space holds only
    the characters the task can use.
    """

    def __init__(self, chars: str = _ARITHMETIC_CHARS) -> None:
        if len(set(chars)) != len(chars):
            raise ValueError(f"tokenizer alphabet has duplicate characters: {chars!r}")
        self.chars = chars
        self._id_of = {c: i + len(_SPECIALS) for i, c in enumerate(chars)}
        self._char_of = {i: c for c, i in self._id_of.items()}

    pad_token_id = 0
    bos_token_id = 1
    eos_token_id = 2

    @property
    def vocab_size(self) -> int:
        """Returns the number of token ids (specials plus alphabet)."""
        return len(_SPECIALS) + len(self.chars)

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Returns the token ids of ``text``; raises ``ValueError`` on a character not in the alphabet."""
        try:
            ids = [self._id_of[c] for c in text]
        except KeyError as e:
            raise ValueError(
                f"character {e.args[0]!r} is not in the alphabet {self.chars!r}"
            ) from None
        if add_bos:
            ids.insert(0, self.bos_token_id)
        if add_eos:
            ids.append(self.eos_token_id)
        return ids

    def decode(self, ids: Iterable[int], stop_at_eos: bool = True) -> str:
        """Returns the text of ``ids``, skipping pad and bos and stopping at the first eos."""
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_token_id and stop_at_eos:
                break
            if i in self._char_of:
                out.append(self._char_of[i])
        return "".join(out)

    def batch_decode(self, batch: Sequence[Sequence[int]]) -> list[str]:
        """Returns ``decode`` of each row."""
        return [self.decode(row) for row in batch]
