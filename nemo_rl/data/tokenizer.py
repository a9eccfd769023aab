"""Tokenizers behind one interface: the built-in character tokenizer of the arithmetic task, and
any Hugging Face tokenizer in a local folder (:class:`HFTokenizer`). Nothing is downloaded.

Both give ``encode(text, add_bos, add_eos)``, ``decode(ids)``, ``batch_decode``,
``pad_token_id``, ``eos_token_id``, ``bos_token_id`` (None where the tokenizer adds none),
``vocab_size``, ``has_chat_template``/``chat_prompt`` and ``save_pretrained``, so the loops,
the workers and the generation backends never ask which one they hold.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

__all__ = [
    "CharTokenizer",
    "HFTokenizer",
    "Tokenizer",
    "load_tokenizer",
    "tokenizer_folder_problem",
]

_SPECIALS = ("<pad>", "<bos>", "<eos>")
_ARITHMETIC_CHARS = "0123456789+="
# What a Hugging Face tokenizer folder holds (one of them is enough for AutoTokenizer).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


class Tokenizer(Protocol):
    """What the loops, workers and generation backends use of a tokenizer."""

    pad_token_id: int
    eos_token_id: int
    bos_token_id: int | None
    has_chat_template: bool

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]: ...

    def decode(self, ids: Iterable[int], stop_at_eos: bool = True) -> str: ...

    def batch_decode(self, batch: Sequence[Sequence[int]]) -> list[str]: ...

    def chat_prompt(self, text: str) -> str: ...

    def save_pretrained(self, path: str) -> None: ...


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
    has_chat_template = False

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

    def chat_prompt(self, text: str) -> str:
        """Raises ``ValueError``: the character tokenizer has no chat template."""
        raise ValueError("the built-in character tokenizer has no chat template")

    def to_hf(self) -> Any:
        """Returns this tokenizer as a ``transformers.PreTrainedTokenizerFast`` with the same ids
        (built with the ``tokenizers`` library: one token per character, bos added in front), so
        a model trained with it can be saved as a Hugging Face folder that others load."""
        from tokenizers import Regex, decoders, models, pre_tokenizers, processors
        from tokenizers import Tokenizer as RawTokenizer
        from transformers import PreTrainedTokenizerFast

        vocab = {s: i for i, s in enumerate(_SPECIALS)} | self._id_of
        raw = RawTokenizer(models.WordLevel(vocab, unk_token=None))
        raw.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
        raw.decoder = decoders.Fuse()  # characters join without spaces
        raw.post_processor = processors.TemplateProcessing(
            single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", 1)]
        )
        return PreTrainedTokenizerFast(
            tokenizer_object=raw, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>"
        )

    def save_pretrained(self, path: str) -> None:
        """Writes the Hugging Face form of this tokenizer (:meth:`to_hf`) to folder ``path``."""
        self.to_hf().save_pretrained(path)


class HFTokenizer:
    """A Hugging Face tokenizer behind :class:`CharTokenizer`'s interface.

    Its special tokens are used as the model was trained with them: eos ends a response (and is
    the pad token where the tokenizer has none); bos is put in front of a prompt only where the
    tokenizer itself adds one (Llama does, GPT-2 and Qwen do not), and never twice (a chat
    template may already start with it). Raises ``ValueError`` for a tokenizer without an eos
    token (a response could never end).
    """

    def __init__(self, tokenizer: Any, folder: str) -> None:
        self.hf = tokenizer
        self.folder = folder
        if tokenizer.eos_token_id is None:
            raise ValueError(f"{folder}: the tokenizer has no eos token (a response could not end)")
        self.eos_token_id = int(tokenizer.eos_token_id)
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad) if pad is not None else self.eos_token_id
        bos = tokenizer.bos_token_id
        adds_bos = bos is not None and tokenizer.encode("", add_special_tokens=True)[:1] == [bos]
        self.bos_token_id: int | None = int(bos) if adds_bos else None
        self.has_chat_template = bool(getattr(tokenizer, "chat_template", None))
        self._size = len(tokenizer)

    @property
    def vocab_size(self) -> int:
        """Returns the number of token ids, added tokens included (``len(tokenizer)``)."""
        return self._size

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Returns the token ids of ``text``, with bos in front (where the tokenizer uses one and
        ``text`` does not already start with it) and eos at the end when asked."""
        ids = list(self.hf.encode(text, add_special_tokens=False))
        if add_bos and self.bos_token_id is not None and ids[:1] != [self.bos_token_id]:
            ids.insert(0, self.bos_token_id)
        if add_eos:
            ids.append(self.eos_token_id)
        return ids

    def decode(self, ids: Iterable[int], stop_at_eos: bool = True) -> str:
        """Returns the text of ``ids`` up to the first eos, without special tokens; ids past the
        tokenizer's vocabulary (a model's padded embedding rows) are skipped."""
        kept = []
        for i in ids:
            i = int(i)
            if i == self.eos_token_id and stop_at_eos:
                break
            if 0 <= i < self._size:
                kept.append(i)
        return self.hf.decode(kept, skip_special_tokens=True)

    def batch_decode(self, batch: Sequence[Sequence[int]]) -> list[str]:
        """Returns ``decode`` of each row."""
        return [self.decode(row) for row in batch]

    def chat_prompt(self, text: str) -> str:
        """Returns ``text`` as a user turn in the tokenizer's chat template, ending where the
        assistant's answer starts; raises ``ValueError`` if the tokenizer has no template."""
        if not self.has_chat_template:
            raise ValueError(f"{self.folder}: the tokenizer has no chat template")
        return self.hf.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )

    def save_pretrained(self, path: str) -> None:
        """Writes the tokenizer's files to folder ``path``."""
        self.hf.save_pretrained(path)


def tokenizer_folder_problem(path: str) -> str | None:
    """Returns why ``path`` cannot be loaded as a Hugging Face tokenizer, or None."""
    if not os.path.exists(path):
        return (
            f"{path}: no such folder (give a folder that holds a tokenizer, such as tokenizer.json)"
        )
    if not os.path.isdir(path):
        return f"{path}: a file, not a folder (give the folder that holds tokenizer.json)"
    if not any(os.path.isfile(os.path.join(path, f)) for f in _TOKENIZER_FILES):
        return f"{path}: no tokenizer files there (expected one of {', '.join(_TOKENIZER_FILES)})"
    try:
        load_tokenizer(path)
    except Exception as e:  # transformers says why in its own words; one line of it
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return f"{path}: cannot load the tokenizer ({first})"
    return None


@functools.lru_cache(maxsize=8)
def load_tokenizer(folder: str | None) -> Tokenizer:
    """Returns the built-in :class:`CharTokenizer` for None, else the tokenizer in ``folder``
    (``AutoTokenizer``, local files only) as an :class:`HFTokenizer`. Loaded once per process.

    Raises whatever ``AutoTokenizer`` raises, and ``ValueError`` for a tokenizer without eos.
    """
    if folder is None:
        return CharTokenizer()
    from transformers import AutoTokenizer

    return HFTokenizer(AutoTokenizer.from_pretrained(folder, local_files_only=True), folder)
