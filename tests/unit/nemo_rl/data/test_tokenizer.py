import pytest

from nemo_rl.data import CharTokenizer


def test_round_trip_with_specials():
    tok = CharTokenizer()
    ids = tok.encode("42+7=", add_bos=True, add_eos=True)
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
    assert tok.decode(ids) == "42+7="
    assert len(set(ids[1:-1])) == 5  # five distinct characters, five distinct ids
    assert tok.vocab_size == 3 + len("0123456789+=")


def test_decode_stops_at_eos_and_skips_pad():
    tok = CharTokenizer()
    ids = [tok.pad_token_id, *tok.encode("49"), tok.eos_token_id, *tok.encode("7")]
    assert tok.decode(ids) == "49"
    assert tok.decode(ids, stop_at_eos=False) == "497"
    assert tok.batch_decode([tok.encode("1"), tok.encode("23")]) == ["1", "23"]


def test_unknown_character_is_an_error_naming_it():
    with pytest.raises(ValueError, match="'x'"):
        CharTokenizer().encode("1x2")


def test_duplicate_alphabet_is_rejected():
    with pytest.raises(ValueError, match="duplicate"):
        CharTokenizer("0012")


# -- Hugging Face tokenizers behind the same interface -------------------------------------------


def _bpe_without_bos(folder, chat_template: str | None = None) -> str:
    """A byte-level BPE tokenizer trained here (GPT-2 style: no bos in front, no pad token)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|end|>", "<|user|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    raw.train_from_iterator(["what is 12 plus 30? it is 42."] * 50, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|end|>")
    tok.chat_template = chat_template
    tok.save_pretrained(folder)
    return str(folder)


def test_the_character_tokenizer_as_a_hugging_face_folder_keeps_every_id(tmp_path):
    from nemo_rl.data import HFTokenizer, load_tokenizer

    CharTokenizer().save_pretrained(str(tmp_path))
    hf, char = load_tokenizer(str(tmp_path)), CharTokenizer()
    assert isinstance(hf, HFTokenizer)
    assert (hf.vocab_size, hf.pad_token_id, hf.bos_token_id, hf.eos_token_id) == (15, 0, 1, 2)
    for text in ["42+7=", "0", "99+9=108"]:
        assert hf.encode(text, add_bos=True, add_eos=True) == char.encode(text, True, True)
    ids = [char.pad_token_id, *char.encode("49"), char.eos_token_id, *char.encode("7")]
    assert hf.decode(ids) == char.decode(ids) == "49"
    assert not hf.has_chat_template


def test_a_tokenizer_without_bos_or_pad_uses_eos_and_adds_no_bos(tmp_path):
    from nemo_rl.data import load_tokenizer

    tok = load_tokenizer(_bpe_without_bos(tmp_path))
    eos = tok.eos_token_id
    assert tok.bos_token_id is None and tok.pad_token_id == eos
    ids = tok.encode("what is 12 plus 30?", add_bos=True, add_eos=True)
    assert ids[-1] == eos and eos not in ids[:-1] and len(ids) < len("what is 12 plus 30?")
    assert tok.decode(ids) == "what is 12 plus 30?"
    # ids past the tokenizer (a model's padded embedding rows) decode to nothing
    assert tok.decode([*ids[:-1], tok.vocab_size + 5]) == "what is 12 plus 30?"


def test_a_chat_template_wraps_the_prompt_as_a_user_turn(tmp_path):
    from nemo_rl.data import load_tokenizer

    template = (
        "{% for m in messages %}<|user|>{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %} answer:{% endif %}"
    )
    tok = load_tokenizer(_bpe_without_bos(tmp_path, template))
    assert tok.has_chat_template
    assert tok.chat_prompt("what is 12 plus 30?") == "<|user|>what is 12 plus 30? answer:"
    user = tok.hf.convert_tokens_to_ids("<|user|>")
    assert tok.encode(tok.chat_prompt("12"))[0] == user  # the special token, not its letters
    with pytest.raises(ValueError, match="no chat template"):
        CharTokenizer().chat_prompt("12")


def test_a_tokenizer_without_eos_is_refused(tmp_path):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from nemo_rl.data import HFTokenizer

    raw = Tokenizer(models.WordLevel({"a": 0, "b": 1}, unk_token=None))
    with pytest.raises(ValueError, match="no eos token"):
        HFTokenizer(PreTrainedTokenizerFast(tokenizer_object=raw), str(tmp_path))


def test_a_folder_problem_names_the_folder_and_what_is_missing(tmp_path):
    from nemo_rl.data.tokenizer import tokenizer_folder_problem

    assert "no such folder" in tokenizer_folder_problem(str(tmp_path / "nope"))
    (tmp_path / "f").write_text("x")
    assert "a file, not a folder" in tokenizer_folder_problem(str(tmp_path / "f"))
    assert "no tokenizer files" in tokenizer_folder_problem(str(tmp_path))
    (tmp_path / "tokenizer.json").write_text("{not json")
    assert "cannot load the tokenizer" in tokenizer_folder_problem(str(tmp_path))
