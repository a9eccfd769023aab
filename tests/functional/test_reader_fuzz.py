"""The readers (``live-check``, ``view``, ``view --format chrome``, ``report``) against what a
trace file may hold, run as a user would:

- a generated corpus of text the runtime can write (random Unicode, lone surrogates, control
  characters, HTML fragments, NaN and infinities): accepted; no control character reaches the
  terminal; ``report.html``'s inline JSON cannot be broken out of (no ``<`` in it, it parses);
- impossible timestamps, an end before its start and duplicate span ids: ``live-check`` findings;
- ``FUZZ_LINES`` mutated trace lines (bytes flipped, cut, values swapped for other JSON kinds and
  extreme numbers): every reader exits 0, 1 or 2 with zero internal errors or tracebacks.
"""

from __future__ import annotations

import copy
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.spanspec.fixtures.traces import grpo_steps, write_traces

BIN = Path(sys.executable).parent
FUZZ_LINES = 10_000
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e]")


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "spanspec"), *args], capture_output=True, text=True, timeout=timeout
    )


def _sound(r: subprocess.CompletedProcess) -> str:
    out = r.stdout + r.stderr
    assert r.returncode in (0, 1, 2), out[-3000:]
    assert "Traceback" not in out and "internal error" not in out, out[-3000:]
    return out


def _hostile_text(rng: random.Random) -> str:
    pieces = [
        "<!--",
        "<script>",
        "</script>",
        "-->",
        "]]>",
        "&amp;",
        "\u2028",
        "\u2029",
        "\x1b[2J",
        "\x1b]0;title\x07",
        "\r\nfile.py:1: violation: forged",
        "\x00",
        "\ud800",
        "\udcff",
        "\u202e",
        "\U0001f600",
        "'\"`",
    ]
    out = []
    for _ in range(rng.randrange(1, 6)):
        if rng.random() < 0.5:
            out.append(rng.choice(pieces))
        else:
            out.append(
                "".join(chr(rng.randrange(0x20, 0x2FFFF)) for _ in range(rng.randrange(1, 8)))
            )
    return "".join(out)


def _base_lines(tmp_path: Path) -> list[dict]:
    trace = write_traces(tmp_path / "base", grpo_steps(2))
    return [json.loads(line) for line in trace.read_text().splitlines()]


def _spans_of(request: dict) -> list[dict]:
    return [s for rs in request["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def test_text_the_runtime_can_write_is_shown_safely(tmp_path):
    rng = random.Random(7)
    lines = _base_lines(tmp_path)
    planted = []
    for request in lines:
        for span in _spans_of(request):
            text = _hostile_text(rng)
            planted.append(text)
            span["name"] = text if rng.random() < 0.5 else span["name"]
            span.setdefault("attributes", []).append(
                {"key": "rl.note", "value": {"stringValue": _hostile_text(rng)}}
            )
            span["attributes"].append({"key": "rl.reward.mean", "value": {"doubleValue": "NaN"}})
            span["attributes"].append({"key": "rl.x", "value": {"doubleValue": "-Infinity"}})
    path = tmp_path / "traces.jsonl"
    # as the exporter writes it: JSON escapes for what UTF-8 cannot hold
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")

    for args in (["live-check", str(path)], ["view", str(path)], ["view", str(path), "--list"]):
        out = _sound(_cli(*args))
        assert not _CONTROL.search(out.replace("\n", "").replace("\t", "")), args
    html = tmp_path / "report.html"
    r = _cli("report", str(path), "-o", str(html))
    _sound(r)
    assert r.returncode == 0, r.stderr
    page = html.read_text(encoding="utf-8")
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", page, flags=re.S)
    data = [s for s in scripts if s.strip().startswith("{")] or [
        s for s in scripts if '"spans"' in s or '"lanes"' in s
    ]
    assert data, "no inline data"
    for s in data:
        assert "<" not in s and "\u2028" not in s and "\u2029" not in s
    chrome = tmp_path / "trace.json"
    _sound(_cli("view", str(path), "--format", "chrome", "-o", str(chrome)))
    json.loads(chrome.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("change", "finding"),
    [
        ({"startTimeUnixNano": "0"}, "live.impossible_time"),
        ({"startTimeUnixNano": "-5"}, "live.impossible_time"),
        ({"endTimeUnixNano": str(2**64 + 7)}, "live.impossible_time"),
        ({"startTimeUnixNano": "2000", "endTimeUnixNano": "1000"}, "live.end_before_start"),
        ("duplicate", "live.duplicate_span_id"),
    ],
)
def test_impossible_times_and_duplicate_ids_are_findings(tmp_path, change, finding):
    lines = _base_lines(tmp_path)
    span = _spans_of(lines[0])[0]
    if change == "duplicate":
        other = copy.deepcopy(span)  # another span given the same id (not a re-sent copy)
        other["startTimeUnixNano"] = str(int(other["startTimeUnixNano"]) + 1)
        lines[-1]["resourceSpans"][-1]["scopeSpans"][-1]["spans"].append(other)
    else:
        span.update(change)
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = _sound(_cli("live-check", str(path)))
    assert finding in out and "traces.jsonl:1:" in out + "traces.jsonl:" + str(len(lines)), out
    _sound(_cli("view", str(path)))


_EXTREMES = [
    None,
    True,
    0,
    -1,
    2**64,
    -(2**63) - 1,
    10**400,
    1.5,
    1e308,
    "NaN",
    "Infinity",
    "",
    "x",
    [],
    {},
    [None],
    {"a": None},
    "\ud800",
]


def _mutate_json(value: object, rng: random.Random) -> object:
    """``value`` with one node (chosen at random) replaced by an extreme value or another kind."""
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(list(value))
        if rng.random() < 0.15:
            del value[key]
        else:
            value[key] = _mutate_json(value[key], rng)
        return value
    if isinstance(value, list) and value and rng.random() < 0.8:
        i = rng.randrange(len(value))
        value[i] = _mutate_json(value[i], rng)
        return value
    return copy.deepcopy(rng.choice(_EXTREMES))


def _mutate_text(line: str, rng: random.Random) -> str:
    kind = rng.randrange(4)
    i = rng.randrange(len(line))
    if kind == 0:
        return line[:i] + chr(rng.randrange(0, 0x250)) + line[i + 1 :]
    if kind == 1:
        return line[:i]
    if kind == 2:
        return line[:i] + line[rng.randrange(i, len(line)) :]
    return line[:i] + rng.choice(['"', "{", "]", ",", "\\", "\\ud800", "1e999", "NaN"]) + line[i:]


def test_readers_survive_mutated_trace_lines(tmp_path):
    rng = random.Random(23)
    base = _base_lines(tmp_path)
    out_lines = []
    while len(out_lines) < FUZZ_LINES:
        request = copy.deepcopy(rng.choice(base))
        if rng.random() < 0.7:
            for _ in range(rng.randrange(1, 4)):
                request = _mutate_json(request, rng)
            line = json.dumps(request)
        else:
            line = _mutate_text(json.dumps(request), rng)
        out_lines.append(line.replace("\n", " "))
    path = tmp_path / "traces.jsonl"
    path.write_text("\n".join(out_lines) + "\n", encoding="utf-8", errors="surrogatepass")
    for args in (
        ["live-check", str(path)],
        ["view", str(path), "--list"],
        ["view", str(path)],
        ["view", str(path), "--format", "chrome", "-o", str(tmp_path / "c.json")],
        ["report", str(path), "-o", str(tmp_path / "r.html")],
        ["diff", str(path), str(path)],
    ):
        _sound(_cli(*args))
