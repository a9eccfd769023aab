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
