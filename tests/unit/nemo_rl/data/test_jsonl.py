"""The JSONL reader: rows with their line numbers, and one message naming the setting,
``file:line`` and the field for each kind of bad line."""

import pytest

from nemo_rl.data import DataConfig, DataError, read_jsonl, write_jsonl

ROLES = ("prompt", "answer")


def _read(path, roles=ROLES, data=None, numbers=("answer",)):
    return read_jsonl(str(path), roles, data or DataConfig(), "data.train_path", numbers)


def test_rows_keep_their_line_numbers_and_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"prompt": "1+2=", "answer": "3"}\n\n{"prompt": "4+5=", "answer": 9}\n')
    assert _read(path) == [
        (1, {"prompt": "1+2=", "answer": "3"}),
        (3, {"prompt": "4+5=", "answer": "9"}),
    ]


def test_field_names_are_configurable(tmp_path):
    path = tmp_path / "t.jsonl"
    write_jsonl(str(path), [{"question": "q", "solution": "s", "extra": 1}])
    data = DataConfig(prompt_key="question", answer_key="solution")
    assert _read(path, data=data) == [(1, {"prompt": "q", "answer": "s"})]


BAD = [
    # (case, content, where, words)
    ("not JSON", '{"prompt": "a", "answer": "b"}\n{"prompt": "a",\n', ":2:16:", ["not JSON"]),
    ("not UTF-8", b'{"prompt": "\xff", "answer": "b"}\n', ":1:13:", ["not UTF-8"]),
    ("a list", '["a", "b"]\n', ":1:", ["a list, expected a JSON object", '"prompt" and "answer"']),
    (
        "missing field",
        '{"prompt": "a", "answr": "b"}\n',
        ":1:",
        ['no "answer" field', "did you mean 'answr'", "data.answer_key"],
    ),
    ("prompt a number", '{"prompt": 12, "answer": "b"}\n', ":1:", ['"prompt" is a number (12)']),
    ("answer null", '{"prompt": "a", "answer": null}\n', ":1:", ['"answer" is null', "a number"]),
    ("answer a bool", '{"prompt": "a", "answer": true}\n', ":1:", ['"answer" is a boolean']),
    ("empty prompt", '{"prompt": "  ", "answer": "b"}\n', ":1:", ['"prompt" is empty']),
    ("empty file", "", ":", ["no examples", "the file is empty"]),
    ("blank lines only", "\n  \n", ":", ["no examples"]),
]


@pytest.mark.parametrize(
    ("content", "where", "words"), [pytest.param(*c[1:], id=c[0]) for c in BAD]
)
def test_a_bad_line_is_one_message_naming_setting_file_line_and_field(
    tmp_path, content, where, words
):
    path = tmp_path / "t.jsonl"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(DataError) as e:
        _read(path)
    message = str(e.value)
    assert message.startswith(f"data.train_path: {path}{where}"), message
    assert "\n" not in message
    for w in words:
        assert w in message, message


def test_a_response_must_be_text_even_where_an_answer_may_be_a_number(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"prompt": "a", "response": 3}\n')
    with pytest.raises(DataError, match='"response" is a number'):
        _read(path, roles=("prompt", "response"))


def test_a_missing_file_or_a_folder_is_named(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        _read(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match="not a file"):
        _read(tmp_path)
