"""A corpus of bad input, each case run as a user would in a subprocess: registries, trace files
and code through the ``spanspec`` CLI; run configs, overrides and environment variables through
``examples/run_grpo.py`` and ``python -m nemo_rl.telemetry settings``.

Every case asserts the exit code, where the message points (file:line:col, the config key or the
variable) and the words that say what is wrong, and that no traceback or internal error shows.
Each class of input has several members so that the fix is for the class, not the example.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = ROOT / "schemas" / "span_groups.yaml"
BIN = Path(sys.executable).parent
HEAD = "version: 1\ngroups:\n  g:\n    description: x\n"
SPAN = "spans:\n  - name: a.b\n    group: g\n    brief: x\n"


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NEMO_RL_OTEL_", "NEMO_LENS_", "OTEL_", "SPANSPEC_"))
    }
    env.update(extra or {})
    return env


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 120):
    return subprocess.run(
        args, cwd=cwd, env=_env(env), capture_output=True, text=True, timeout=timeout
    )


def _no_crash(out: str) -> None:
    assert "Traceback" not in out, out
    assert "internal error" not in out, out


# -- registries: spanspec check FILE ------------------------------------------------------------

REGISTRIES = [
    # (case, content, where, words)
    ("unknown top key", HEAD + SPAN + "spanz: []\n", ":9:1:", ["spanz", "did you mean 'spans'"]),
    ("duplicate key", HEAD + "  g:\n    description: y\n", ":5:3:", ["'g' appears twice"]),
    ("unknown group", HEAD + SPAN.replace("group: g", "group: gg"), ":7:12:", ["'gg'"]),
    (
        "bad attribute type",
        HEAD + "attributes:\n  k:\n    type: strng\n    brief: b\n",
        ":7:11:",
        ["did you mean 'string'"],
    ),
    ("no version", "groups:\n  g:\n    description: x\n", ":1:1:", ["version", "missing"]),
    ("a list", "- a\n- b\n", ":1:1:", ["a mapping"]),
    ("empty", "", ":1:1:", ["empty"]),
    ("duplicate span", HEAD + SPAN + SPAN[7:], ":9:11:", ["'a.b' is already declared"]),
    ("preset cycle", HEAD + "presets:\n  p: [q]\n  q: [p]\n", ":6:6:", ["cycle"]),
    ("not UTF-8", HEAD + "  h:\n    description: \xff\n", ":6:", ["not UTF-8"]),
    ("unclosed flow", HEAD + "spans: [\n", ":6:1:", ["invalid YAML"]),
    ("bad indentation", "version: 1\n groups:\n   g: 1\n", ":2:8:", ["invalid YAML"]),
    ("tab indent", "version: 1\ngroups:\n\tg:\n", ":3:1:", ["tab", "spaces"]),
    ("tab before a list item", HEAD + "spans:\n\t- name: a.b\n", ":6:1:", ["tab"]),
    ("NUL byte", "\0version: 1\n", ":1:1:", ["NUL byte"]),
    ("NUL later", HEAD + "  h:\n    description: a\0b\n", ":6:19:", ["NUL byte"]),
    ("control char", "version: 1\x07\n", ":1:11:", ["control character U+0007"]),
    ("recursive alias", "version: 1\ngroups: &a\n  g: *a\n", ":", ["alias", "inside"]),
    ("recursive alias list", "a: &a [*a]\n", ":1:4:", ["alias refers to the anchor"]),
    (
        "billion laughs",
        "version: 1\na: &a [x,x,x,x,x,x,x,x,x]\n"
        + "".join(
            f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        ":",
        ["expand to more than", "billion laughs"],
    ),
    ("version true", "version: true\ngroups: {}\n", ":1:10:", ["expected 1", "got true"]),
    ("colon in a value", HEAD + "  h:\n    description: note: x\n", ":6:22:", ["quote a value"]),
    ("undefined alias", HEAD + "  h: *nope\n", ":5:6:", ["needs an &anchor"]),
    (
        "backslash in double quotes",
        HEAD + '  h:\n    description: "C:\\xyz"\n',
        ":6:",
        ["backslash starts an escape", "'single quotes'"],
    ),
    (
        "a date for an enum",
        HEAD.replace("description: x", "description: x\n    bucket: 2001-01-01"),
        ":5:",
        ["got 2001-01-01", "as a date; quote it"],
    ),
    ("version 2", "version: 2\ngroups: {}\n", ":1:10:", ["expected 1", "got 2"]),
    ("version text", "version: one\ngroups: {}\n", ":1:10:", ["expected 1"]),
    (
        "yes unquoted",
        HEAD + "attributes:\n  k:\n    type: string\n    brief: b\n    cardinality: yes\n",
        ":9:18:",
        ["unquoted yes", "quote it"],
    ),
    (
        "wrong placeholder",
        HEAD + "spans:\n  - name: rl.{algo}.step\n    group: g\n    brief: x\n",
        ":6:11:",
        ["'{algo}' is not a placeholder", "{algorithm}"],
    ),
    (
        "upper case name",
        HEAD + "spans:\n  - name: Rl.Step\n    group: g\n    brief: x\n",
        ":6:11:",
        ["lower-case dotted name", "use lower case"],
    ),
    ("group word", "version: 1\ngroups:\n  Bad-Group:\n    description: x\n", ":3:3:", ["word"]),
    (
        "allowed: [yes, no] for a string",
        HEAD + "attributes:\n  k:\n    type: string\n    brief: b\n    allowed: [yes, no]\n",
        ":9:15:",
        ["allowed[0]", "true is not a string", "quote it"],
    ),
    (
        "allowed: a mapping among the values",
        HEAD + "attributes:\n  k:\n    type: string\n    brief: b\n    allowed: [a, {b: c}]\n",
        ":9:18:",
        ["allowed.1", "expected a string, an integer, a number or a boolean", "got a mapping"],
    ),
    (
        "a 20,000-character key",
        HEAD + "x" * 20_000 + ": 1\n",
        ":5:",
        ["a key of 20000 characters", "1,024 characters"],
    ),
    (
        "a 1,025-character key",
        HEAD + "  " + "g" * 1025 + ":\n    description: x\n",
        ":5:",
        ["a key of 1025 characters", "1,024 characters"],
    ),
    (
        "a placeholder twice",
        HEAD + "spans:\n  - name: rl.{algorithm}.{algorithm}\n    group: g\n    brief: x\n"
        "    algorithms: [grpo]\n",
        ":6:11:",
        ["{algorithm} appears 2 times", "once"],
    ),
    (
        "a placeholder three times",
        HEAD + "spans:\n  - name: rl.{algorithm}.{algorithm}.{algorithm}\n    group: g\n"
        "    brief: x\n    algorithms: [grpo]\n",
        ":6:11:",
        ["{algorithm} appears 3 times"],
    ),
]


@pytest.mark.parametrize("bad", [["{a: 1}", "[x]", "{b: 2}"], ["[1]", "{c: d}", "[[2]]"]])
def test_an_allowed_list_of_bad_values_is_one_finding_per_value(tmp_path, bad):
    path = tmp_path / "reg.yaml"
    path.write_text(
        HEAD
        + f"attributes:\n  k:\n    type: string\n    brief: b\n    allowed: [{', '.join(bad)}]\n"
    )
    r = _run([str(BIN / "spanspec"), "check", str(path)], tmp_path, timeout=60)
    out = r.stdout + r.stderr
    _no_crash(out)
    lines = [x for x in out.splitlines() if "violation:" in x]
    assert len(lines) == len(bad), out
    for i, line in enumerate(lines):
        assert f"allowed.{i}:" in line and "expected a string, an integer" in line, line


def test_an_empty_group_expression_says_nothing_is_enabled(tmp_path):
    for expression in ("", "  "):
        r = _run([str(BIN / "spanspec"), "groups", "--", expression], tmp_path, timeout=60)
        assert r.returncode == 0
        _no_crash(r.stdout + r.stderr)
        assert "nothing is enabled" in r.stderr, r.stderr


def test_the_python_api_raises_the_cli_line_not_pydantic(tmp_path):
    code = (
        "from nemo_rl.telemetry import TelemetryConfig\n"
        "for kw in [dict(exporter=5), dict(exporterr='file'), dict(user_id=['sekrit-api']),"
        " dict(enabled='maybe'), dict(prometheus_port='http://u:sekrit-pw@h')]:\n"
        "    try:\n"
        "        TelemetryConfig(**kw)\n"
        "    except ValueError as exc:\n"
        "        print(type(exc).__name__, '|', exc)\n"
    )
    r = _run([sys.executable, "-c", code], ROOT, timeout=60)
    _no_crash(r.stdout + r.stderr)
    lines = r.stdout.splitlines()
    assert len(lines) == 5, r.stdout + r.stderr
    for line in lines:
        assert line.startswith("ConfigError | invalid config: "), line
    out = r.stdout
    assert (
        "pydantic" not in out
        and "http" not in out.replace("http://***@h", "")
        and "sekrit" not in out
    )
    assert "telemetry.exporter: expected a string (got 5)" in out
    assert "did you mean 'exporter'" in out
    assert "telemetry.user_id: expected a string (got [REDACTED])" in out


@pytest.mark.parametrize(
    ("content", "where", "words"),
    [pytest.param(c, w, ws, id=i) for i, c, w, ws in REGISTRIES],
)
def test_a_bad_registry_is_one_finding_at_its_place(tmp_path, content, where, words):
    path = tmp_path / "reg.yaml"
    path.write_bytes(content.encode("latin-1"))  # "\xff" stays one byte: not UTF-8
    r = _run([str(BIN / "spanspec"), "check", str(path)], tmp_path, timeout=60)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    _no_crash(out)
    (line,) = [x for x in out.splitlines() if "violation:" in x][:1]
    assert line.startswith(f"{path}{where}") or f"reg.yaml{where}" in line, out
    for w in words:
        assert w in line, line


# -- trace files: spanspec live-check / view FILE -------------------------------------------------

_SPAN = (
    '{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "rl.grpo.step", "traceId": '
    '"0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331", "startTimeUnixNano": "1", '
    '"endTimeUnixNano": "2", "attributes": []}]}]}]}\n'
)
TRACES = [
    # (case, content, words)
    ("not OTLP", '{"resourceSpans": 3}\n', ["otlp.malformed", ":1:1:"]),
    ("missing file", None, ["file.unreadable", "cannot read"]),
    ("not JSON, whole line", "not json\n", ["otlp.invalid_json", ":1:1:"]),
    ("torn line mid-file", '{"resourceSpans": [{"resou\n{"resourceSpans": []}\n', [":1:"]),
    ("glued after a torn line", '{"resourceSpans": [{{"resourceSpans": []}\n', [":1:"]),
    ("nested too deep", "[" * 100_000 + "\n", ["nested too deeply", ":1:1:"]),
    ("a list, not a request", "[1, 2]\n", ["otlp.malformed"]),
    ("binary", "\x00\x01\x02\n", ["otlp.invalid_json"]),
    ("a bad id", _SPAN.replace("b7ad6b7169203331", "zz"), ["id 'zz' is neither hex nor base64"]),
    (
        "an int attribute that is not one",
        _SPAN.replace(
            '"attributes": []',
            '"attributes": [{"key": "rl.iteration", "value": {"intValue": "NaN"}}]',
        ),
        ["attribute 'rl.iteration': intValue 'NaN' is not an integer"],
    ),
    (
        "a null resourceSpans item",
        '{"resourceSpans": [null]}\n',
        ["resourceSpans[0]: expected a JSON object, got null", ":1:1:"],
    ),
    (
        "a null span",
        '{"resourceSpans": [{"scopeSpans": [{"spans": [null]}]}]}\n',
        ["resourceSpans[0].scopeSpans[0].spans[0]: expected a JSON object, got null"],
    ),
    (
        "scopeSpans an object",
        '{"resourceSpans": [{"scopeSpans": {"spans": []}}]}\n',
        ["resourceSpans[0].scopeSpans: expected a JSON list, got an object"],
    ),
    (
        "status a number",
        _SPAN.replace('"attributes": []', '"attributes": [], "status": 5'),
        ["status: expected a JSON object, got a number"],
    ),
    (
        "attributes an object",
        _SPAN.replace('"attributes": []', '"attributes": {"a": 1}'),
        ["attributes: expected a list of {key, value} objects"],
    ),
    (
        "an arrayValue that is a string",
        _SPAN.replace(
            '"attributes": []', '"attributes": [{"key": "k", "value": {"arrayValue": "x"}}]'
        ),
        ["arrayValue: expected a JSON object, got a string"],
    ),
    (
        "a fractional timestamp",
        _SPAN.replace('"startTimeUnixNano": "1"', '"startTimeUnixNano": 1.5'),
        ["startTimeUnixNano 1.5 is not an integer"],
    ),
]


@pytest.mark.parametrize("command", ["live-check", "view"])
@pytest.mark.parametrize(("content", "words"), [pytest.param(c, ws, id=i) for i, c, ws in TRACES])
def test_a_bad_trace_file_is_a_violation_of_that_file(tmp_path, command, content, words):
    path = tmp_path / "traces.jsonl"
    if content is not None:
        path.write_text(content)
    r = _run([str(BIN / "spanspec"), command, str(path)], tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    _no_crash(out)
    assert "violation" in out
    for w in words:
        assert w in out, out


def _chain(parents: dict[int, int]) -> str:
    """One request: a step span (id 1) and spans whose parent ids are given (id -> parent id)."""

    def span(name: str, span_id: int, parent: int | None) -> dict:
        return {
            "name": name,
            "traceId": "0af7651916cd43dd8448eb211c80319c",
            "spanId": f"{span_id:016x}",
            **({"parentSpanId": f"{parent:016x}"} if parent else {}),
            "startTimeUnixNano": "1000",
            "endTimeUnixNano": "5000",
        }

    step_parent = parents.pop(1, None)
    spans = [span("rl.grpo.step", 1, step_parent)]
    spans += [span("rl.grpo.rollout", i, parent) for i, parent in parents.items()]
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + "\n"


@pytest.mark.parametrize(
    "command",
    [["view"], ["view", "--format", "chrome", "-o", "out.json"], ["report", "-o", "r.html"]],
    ids=["view", "chrome", "report"],
)
@pytest.mark.parametrize(
    "parents",
    [{1: 2, 2: 1}, {i + 1: i for i in range(1, 5001)}],
    ids=["parents that loop", "a chain 5,000 deep"],
)
def test_a_tree_that_loops_or_runs_deep_is_drawn_not_a_crash(tmp_path, command, parents):
    path = tmp_path / "traces.jsonl"
    path.write_text(_chain(dict(parents)))
    r = _run([str(BIN / "spanspec"), *command, str(path)], tmp_path, timeout=60)
    _no_crash(r.stdout + r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rl.grpo.step" in r.stdout or (tmp_path / command[-1]).exists()


# -- code: spanspec check REGISTRY --code PATH ----------------------------------------------------

CODE = [
    # (case, file name, content, where, words)
    (
        "undeclared span",
        "a.py",
        'import spanspec\nwith spanspec.span("rl.grpo.stepp"):\n    pass\n',
        ":2:20:",
        ["did you mean 'rl.grpo.step'"],
    ),
    ("syntax error", "b.py", "def f(:\n", ":1:", ["cannot parse"]),
    ("nested too deep", "c.py", "x = " + "(" * 300 + ")" * 300 + "\n", ":1:", ["cannot parse"]),
    ("dangling link", "d.py", None, ":0:0:", ["file.unreadable", "leads nowhere"]),
    ("link loop", "e.py", "LOOP", ":0:0:", ["file.unreadable", "loops"]),
    ("too deep for ast", "f.py", "x = 1" + "+1" * 50_000 + "\n", ":1:1:", ["nested too deeply"]),
    ("not UTF-8", "g.py", b"x = '\xff'\n", ":", ["not UTF-8"]),
]


@pytest.mark.parametrize(
    ("name", "content", "where", "words"),
    [pytest.param(n, c, w, ws, id=i) for i, n, c, w, ws in CODE],
)
def test_bad_code_is_a_finding_of_that_file_and_the_rest_is_still_checked(
    tmp_path, name, content, where, words
):
    code = tmp_path / "code"
    code.mkdir()
    if content is None:
        (code / name).symlink_to(tmp_path / "gone.py")
    elif content == "LOOP":
        (code / name).symlink_to(code / "loop_b.py")
        (code / "loop_b.py").symlink_to(code / name)
    elif isinstance(content, bytes):
        (code / name).write_bytes(content)
    else:
        (code / name).write_text(content)
    # a good file beside it, with a finding of its own that must still be reported
    (code / "zz_other.py").write_text('import spanspec\nspanspec.span("rl.grpo.nope")\n')
    r = _run([str(BIN / "spanspec"), "check", str(REGISTRY), "--code", str(code)], tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    _no_crash(out)
    lines = [x for x in out.splitlines() if f"{name}{where}" in x]
    assert lines, out
    for w in words:
        assert w in lines[0], lines[0]
    assert "zz_other.py:2:" in out and "rl.grpo.nope" in out


def test_a_link_loop_in_a_folder_of_configs_is_a_finding_and_the_rest_is_checked(tmp_path):
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "a.yaml").symlink_to(folder / "b.yaml")
    (folder / "b.yaml").symlink_to(folder / "a.yaml")
    (folder / "up").symlink_to(tmp_path)  # a linked folder is not entered: no endless walk
    (folder / "run.yaml").write_text("telemetry:\n  exporterr: file\n")
    r = _run([str(BIN / "spanspec"), "check", str(REGISTRY), str(folder)], tmp_path, timeout=60)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    _no_crash(out)
    assert "a.yaml:0:0: violation: file.unreadable: a symbolic link that loops" in out
    assert "run.yaml:2:3:" in out and "exporterr" in out


@pytest.mark.parametrize(
    "args",
    [
        ["check", "/dev/zero"],
        ["check", str(REGISTRY), "--code", "/dev/zero"],
        ["live-check", "/dev/zero"],
        ["view", "/dev/zero"],
    ],
    ids=["registry", "code", "live-check", "view"],
)
def test_an_endless_file_is_a_finding_not_a_hang(tmp_path, args):
    r = _run([str(BIN / "spanspec"), *args], tmp_path, timeout=60)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    _no_crash(out)
    assert "/dev/zero:0:0: violation: file.unreadable" in out and "not a regular file" in out


# -- run configs, overrides and variables: examples/run_grpo.py and `settings` ------------------

GRPO = str(ROOT / "examples" / "run_grpo.py")
TELEMETRY = [sys.executable, "-m", "nemo_rl.telemetry", "settings"]

CONFIGS = [
    # (case, config text or None (the example's), overrides, env, words)
    ("yaml syntax", "grpo:\n  max_steps: [1\n", [], {}, [":3:1: invalid YAML"]),
    ("interpolation", "telemetry:\n  file_dir: ${nope.x}\n", [], {}, ["nope.x", "file_dir"]),
    ("missing file", "MISSING", [], {}, ["no such config file"]),
    ("not a mapping", "- a\n", [], {}, ["a mapping of sections"]),
    (None, None, ["telemetry.enabled=maybe"], {}, ["telemetry.enabled", "'maybe'"]),
    (None, None, ["telemetry.exporterr=file"], {}, ["telemetry.exporterr", "exporter"]),
    (None, None, ["telemetry.exporter=otlpp"], {}, ["exporter", "did you mean 'otlp'"]),
    (None, None, ["telemetry.span_groups=per_stepp"], {}, ["telemetry.span_groups", "per_step"]),
    (None, None, ["telemetry.span_groups=',,'"], {}, ["span_groups", "empty word"]),
    (None, None, ["telemetry.shutdown_timeout_s=1e10"], {}, ["shutdown_timeout_s", "3600"]),
    (None, None, ["telemetry.shutdown_timeout_s=.inf"], {}, ["shutdown_timeout_s"]),
    (None, None, ["telemetry.export_sample_rate=2"], {}, ["export_sample_rate"]),
    (None, None, ["telemetry.file_dir={tmp}/a_file/sub"], {}, ["file_dir", "not a folder"]),
    (None, None, [], {"NEMO_RL_OTEL_ENABLED": "maybe"}, ["NEMO_RL_OTEL_ENABLED='maybe'"]),
    (None, None, [], {"NEMO_RL_OTEL_SPAN_GROUPS": "zzz"}, ["NEMO_RL_OTEL_SPAN_GROUPS='zzz'"]),
    (None, None, [], {"NEMO_RL_OTEL_SPAN_GROUPS": "a,,b"}, ["NEMO_RL_OTEL_SPAN_GROUPS"]),
    (None, None, [], {"NEMO_RL_OTEL_SHUTDOWN_TIMEOUT_S": "inf"}, ["SHUTDOWN_TIMEOUT_S='inf'"]),
    (None, None, [], {"NEMO_RL_OTEL_EXPORT_RANK": "-1"}, ["NEMO_RL_OTEL_EXPORT_RANK"]),
    (None, None, [], {"NEMO_LENS_EXPORTER": "kafka"}, ["NEMO_LENS_EXPORTER='kafka'"]),
    (None, None, [], {"OTEL_BSP_MAX_QUEUE_SIZE": "abc"}, ["OTEL_BSP_MAX_QUEUE_SIZE='abc'"]),
    (None, None, [], {"OTEL_METRIC_EXPORT_INTERVAL": "1.5"}, ["OTEL_METRIC_EXPORT_INTERVAL"]),
    (
        None,
        None,
        ["telemetry.exporter=otlp"],
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "not-a-url"},
        ["OTEL_EXPORTER_OTLP_ENDPOINT='not-a-url'", "expected a URL"],
    ),
    (
        None,
        None,
        ["telemetry.exporter=otlp"],
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://:4318"},
        ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"],
    ),
    (
        None,
        None,
        ["telemetry.exporter=file,otlp"],
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "x"},
        ["OTEL_EXPORTER_OTLP_PROTOCOL='x'", "grpc, http/protobuf"],
    ),
    (
        None,
        None,
        ["telemetry.exporter=otlp"],
        {"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"},
        ["OTEL_EXPORTER_OTLP_TIMEOUT='soon'"],
    ),
    (
        None,
        None,
        ["telemetry.exporter=otlp"],
        {"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "api-key=k,sekrit-token"},
        ["OTEL_EXPORTER_OTLP_TRACES_HEADERS (value not shown", "item 2 is not key=value"],
    ),
    (
        None,
        None,
        ["telemetry.exporter=otlp"],
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        },
        ["OTEL_EXPORTER_OTLP_ENDPOINT='collector:4318'", "http://collector:4318"],
    ),
    (
        None,
        None,
        ["telemetry.exporter=otlp"],
        {"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"},
        ["OTEL_EXPORTER_OTLP_CERTIFICATE='/nonexistent/ca.pem'", "cannot read the file"],
    ),
    (
        None,
        None,
        ["telemetry.exporter=otlp"],
        {"OTEL_EXPORTER_OTLP_METRICS_INSECURE": "yes"},
        ["OTEL_EXPORTER_OTLP_METRICS_INSECURE='yes'", "true or false"],
    ),
    (
        None,
        None,
        [],
        {"NEMO_RL_OTEL_SPAN_GROUP": "all"},
        ["NEMO_RL_OTEL_SPAN_GROUP: unknown variable", "did you mean 'NEMO_RL_OTEL_SPAN_GROUPS'"],
    ),
    (None, None, ["telemetry.file_dir=/proc/telemetry"], {}, ["file_dir", "cannot create"]),
]
CONFIG_IDS = [c[0] or "+".join(c[2] + [f"{k}={v}" for k, v in c[3].items()]) for c in CONFIGS]


def _overrides(tmp_path: Path, overrides: list[str]) -> list[str]:
    (tmp_path / "a_file").write_text("")
    return [o.replace("{tmp}", str(tmp_path)) for o in overrides]


def _config_args(tmp_path: Path, text: str | None) -> list[str]:
    if text is None:
        return []
    path = tmp_path / "cfg.yaml"
    if text != "MISSING":
        path.write_text(text)
    return [str(path)]


def _one_error_line(r: subprocess.CompletedProcess, words: list[str]) -> None:
    _no_crash(r.stdout + r.stderr)
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1, r.stderr
    for w in words:
        assert w in errors[0], errors[0]


@pytest.mark.parametrize(("_case", "text", "overrides", "env", "words"), CONFIGS, ids=CONFIG_IDS)
def test_settings_refuses_in_one_line(tmp_path, _case, text, overrides, env, words):
    config = _config_args(tmp_path, text) or [str(ROOT / "examples/configs/grpo_tiny.yaml")]
    r = _run([*TELEMETRY, *config, *_overrides(tmp_path, overrides)], tmp_path, env)
    assert r.returncode == 2, r.stdout + r.stderr
    _one_error_line(r, words)


# The run itself: a representative member of each class (each start costs an import of torch).
RUN_CASES = [0, 4, 7, 12, 14, 19, 21]


@pytest.mark.parametrize(
    ("_case", "text", "overrides", "env", "words"),
    [CONFIGS[i] for i in RUN_CASES],
    ids=[CONFIG_IDS[i] for i in RUN_CASES],
)
def test_run_grpo_refuses_in_one_line_before_starting(tmp_path, _case, text, overrides, env, words):
    config = _config_args(tmp_path, text)
    args = [sys.executable, GRPO, *(["--config", *config] if config else [])]
    r = _run(
        [*args, *_overrides(tmp_path, overrides), f"logger.log_dir={tmp_path}/run"], tmp_path, env
    )
    assert r.returncode == 2, r.stdout + r.stderr
    _one_error_line(r, words)
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_settings_names_a_nemo_lens_variable_it_does_not_read(tmp_path):
    r = _run([*TELEMETRY], tmp_path, {"NEMO_LENS_SAMPLER_ENABLED": "1"})
    assert r.returncode == 0, r.stderr
    assert "warning: NEMO_LENS_SAMPLER_ENABLED: not a setting here, ignored" in r.stderr


def test_settings_takes_overrides_without_a_config_file(tmp_path):
    r = _run([*TELEMETRY, "telemetry.span_groups=per_stepp"], tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    _one_error_line(r, ["telemetry.span_groups", "per_step"])
    r = _run([*TELEMETRY, "telemetry.exporter=console"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "config telemetry.exporter" in r.stdout


def test_a_bad_header_is_named_without_quoting_it(tmp_path):
    env = {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20x,sekrit-token-1"}
    r = _run([*TELEMETRY, "telemetry.exporter=otlp"], tmp_path, env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "OTEL_EXPORTER_OTLP_HEADERS" in r.stderr
    assert "sekrit-token-1" not in r.stdout + r.stderr and "Bearer" not in r.stdout + r.stderr


def test_settings_shows_user_id_redacted(tmp_path):
    r = _run([*TELEMETRY], tmp_path, {"NEMO_RL_OTEL_USER_ID": "alice-secret-7"})
    assert r.returncode == 0, r.stderr
    assert "alice-secret-7" not in r.stdout + r.stderr
    assert "[REDACTED]" in r.stdout
    r = _run([*TELEMETRY, "--json"], tmp_path, {"NEMO_RL_OTEL_USER_ID": "alice-secret-7"})
    assert "alice-secret-7" not in r.stdout + r.stderr


# -- your own model and data: examples/run_grpo.py and run_sft.py --------------------------------


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Model folders and JSONL files, good and bad, side by side."""
    from transformers import BertConfig

    from nemo_rl.data import CharTokenizer, write_jsonl
    from nemo_rl.models.tiny_hf import save_tiny_llama, write_math_set

    out = tmp_path_factory.mktemp("inputs")
    save_tiny_llama(str(out / "model"))
    write_math_set(str(out))
    (out / "no_config").mkdir()
    (out / "no_config" / "model.safetensors").write_bytes(b"")
    BertConfig(
        vocab_size=15, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, architectures=["BertForMaskedLM"],
    ).save_pretrained(out / "bert")  # fmt: skip
    CharTokenizer("0123456789+=abcdefghij").save_pretrained(str(out / "big_tokenizer"))
    good = '{"prompt": "1+2=", "answer": "3"}\n'
    (out / "not_json.jsonl").write_text(good + '{"prompt": "1+2=", "answer": 3,}\n')
    (out / "no_field.jsonl").write_text('{"prompt": "1+2=", "solution": "3"}\n')
    (out / "wrong_type.jsonl").write_text(good + '{"prompt": ["1+2="], "answer": "3"}\n')
    (out / "empty.jsonl").write_text("\n")
    write_jsonl(str(out / "words.jsonl"), [{"prompt": "1+2=", "answer": "three"}])
    return out


MODEL_DATA = [
    # (case, script, overrides with {in} for the inputs folder, words of the one error line)
    ("missing folder", "grpo", ["policy.model_name={in}/nope"], ["policy.model_name: {in}/nope: no such folder", "huggingface-cli download"]),
    ("no config.json", "grpo", ["policy.model_name={in}/no_config"], ["policy.model_name: {in}/no_config: no config.json"]),
    ("not a causal LM", "grpo", ["policy.model_name={in}/bert"], ["policy.model_name: {in}/bert: a BertForMaskedLM, not a causal LM"]),
    (
        "tokenizer larger than the embeddings",
        "grpo",
        ["policy.model_name={in}/model", "policy.tokenizer={in}/big_tokenizer"],
        ["policy.tokenizer: {in}/big_tokenizer has 25 tokens, more than the 15 rows"],
    ),
    ("a line not JSON", "grpo", ["data.train_path={in}/not_json.jsonl"], ["data.train_path: {in}/not_json.jsonl:2:32: not JSON"]),
    ("a field missing", "grpo", ["data.train_path={in}/no_field.jsonl"], ["data.train_path: {in}/no_field.jsonl:1: no \"answer\" field", "data.answer_key"]),
    ("a field of the wrong type", "grpo", ["data.val_path={in}/wrong_type.jsonl"], ["data.val_path: {in}/wrong_type.jsonl:2: \"prompt\" is a list, expected a string"]),
    ("an empty dataset", "grpo", ["data.train_path={in}/empty.jsonl"], ["data.train_path: {in}/empty.jsonl: no examples"]),
    ("no number for math", "grpo", ["data.train_path={in}/words.jsonl", "env.name=math"], ["data.train_path: {in}/words.jsonl:1: answer 'three' holds no number"]),
    ("an unknown verifier", "grpo", ["env.name=maths"], ["env.name: expected 'arithmetic', 'math' or 'exact' (got 'maths')"]),
    ("SFT reads a response", "sft", [], ["data.train_path: {in}/math_train.jsonl:1: no \"response\" field", "data.response_key"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("script", "overrides", "words"), [pytest.param(*c[1:], id=c[0]) for c in MODEL_DATA]
)
def test_a_bad_model_or_dataset_is_one_line_before_ray_starts(
    tmp_path, inputs, script, overrides, words
):
    defaults = [
        f"data.train_path={inputs}/math_train.jsonl",
        f"data.val_path={inputs}/math_val.jsonl",
    ]
    given = [o.replace("{in}", str(inputs)) for o in overrides]
    args = [o for o in defaults if o.split("=")[0] not in {g.split("=")[0] for g in given}]
    run_dir = tmp_path / "run"
    script_path = ROOT / "examples" / f"run_{script}.py"
    r = _run(
        [sys.executable, str(script_path), *args, *given, f"logger.log_dir={run_dir}"], tmp_path
    )
    assert r.returncode == 2, r.stdout + r.stderr
    _one_error_line(r, [w.replace("{in}", str(inputs)) for w in words])
    assert "Ray" not in r.stdout + r.stderr and not run_dir.exists()  # refused before anything ran
