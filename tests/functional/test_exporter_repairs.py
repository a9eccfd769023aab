"""One bad span loses nothing else: names that are not text (``span(123)``, ``span(1.5)``), names
and attribute keys/values holding lone surrogates (undecodable paths through ``os.fsdecode``,
generated from random bytes) are exported repaired (U+FFFD) and counted, with every other span of
their batch; no SDK traceback. And OpenTelemetry's limits: ``0`` is allowed (the specification),
attributes they drop are counted at shutdown, and ``live-check`` names ``droppedAttributesCount``
instead of blaming the code.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

CHILD = textwrap.dedent(
    """
    import json, logging, os, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    import spanspec
    from spanspec import export
    from spanspec.settings import load_settings

    folder, bad = sys.argv[1], json.loads(sys.argv[2])
    settings = load_settings({"file_dir": folder, "metrics_enabled": False}, env={})
    handle = export.setup(settings, register_atexit=False)
    spanspec.activate(spanspec.load(), "all", tracer_provider=handle.tracer_provider, env_var=None)
    good = 0
    def burst(n):
        global good
        for i in range(n):
            with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": i}):
                good += 1
    names = [123, 1.5, ("a", 1)] + [os.fsdecode(bytes.fromhex(h)) for h in bad]
    for name in names:
        burst(50)
        with spanspec.span(name):  # flushed in the same batch as the good ones
            pass
    for h in bad:
        with spanspec.span("rl.grpo.job", **{"rl.algorithm": "grpo", "rl.model": os.fsdecode(bytes.fromhex(h))}) as s:
            s.add_event(os.fsdecode(bytes.fromhex(h)), {"k": os.fsdecode(bytes.fromhex(h))})
    burst(50)
    stats = handle.shutdown(10)
    (p,) = stats.pipelines
    print(json.dumps({"good": good, "names": len(names), "bad": len(bad), "exported": p.exported,
                      "lost": p.lost, "repaired": p.repaired}))
    """
)


def _undecodable(rng: random.Random, n: int) -> list[str]:
    out = []
    while len(out) < n:
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12)))
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            out.append((b"rl.x." + raw).hex())
    return out


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEMO_RL_OTEL_", "OTEL_"))}
    env.update(extra or {})
    return env


def test_bad_span_names_are_repaired_alone_and_counted(tmp_path):
    bad = _undecodable(random.Random(23), 20)
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), json.dumps(bad)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "Failed to encode" not in r.stderr, r.stderr
    counts = json.loads(r.stdout.strip().splitlines()[-1])
    total = counts["good"] + counts["names"] + counts["bad"]
    assert counts["exported"] == total and counts["lost"] == 0, counts
    assert counts["repaired"] == counts["names"] + counts["bad"], counts
    assert "replaced by U+FFFD" in r.stderr
    text = (tmp_path / "traces.jsonl").read_text(encoding="utf-8")
    assert text.count('"rl.worker.train_microbatch"') == counts["good"]
    assert '"name":"123"' in text.replace(" ", "") and "\\ufffd" in text
    check = subprocess.run(
        [str(BIN / "spanspec"), "live-check", str(tmp_path / "traces.jsonl"), "--groups", "all"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in check.stdout + check.stderr
    assert "live.undeclared_span" in check.stdout  # the repaired names, as found


LIMITED = textwrap.dedent(
    """
    import logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    import spanspec
    from spanspec import export
    from spanspec.settings import load_settings
    settings = load_settings({"file_dir": sys.argv[1], "metrics_enabled": False}, env={})
    handle = export.setup(settings, register_atexit=False)
    spanspec.activate(spanspec.load(), "all", tracer_provider=handle.tracer_provider, env_var=None)
    for i in range(5):
        with spanspec.span("rl.grpo.job", **{"rl.algorithm": "grpo", "rl.model": "m"}):
            pass
    print(handle.shutdown(10).summary())
    """
)


@pytest.mark.parametrize("limit", ["0", "1"])
def test_attributes_dropped_by_limits_are_counted_and_named(tmp_path, limit):
    env = _env({"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": limit})
    settings = subprocess.run(
        [sys.executable, "-m", "nemo_rl.telemetry", "settings"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert settings.returncode == 0, settings.stderr  # 0 is allowed by the specification
    r = subprocess.run(
        [sys.executable, "-c", LIMITED, str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    # Each span starts with 3 attributes: the 2 given and the registry's constant span kind.
    dropped = 5 * (3 - int(limit))
    assert f"{dropped} attributes dropped by OpenTelemetry limits" in r.stdout, r.stdout
    assert "droppedAttributesCount" in r.stderr and "nothing lost" not in r.stderr
    check = subprocess.run(
        [str(BIN / "spanspec"), "live-check", str(tmp_path / "traces.jsonl"), "--groups", "all"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = check.stdout + check.stderr
    assert "live.attributes_dropped_by_limit" in out and "droppedAttributesCount=" in out, out
    assert "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT" in out
    assert "live.missing_attribute" not in out


def test_a_limit_that_is_not_a_number_is_one_line():
    r = subprocess.run(
        [sys.executable, "-m", "nemo_rl.telemetry", "settings"],
        cwd=ROOT,
        env=_env({"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "-1"}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT" in r.stderr
    assert "a whole number >= 0" in r.stderr and "Traceback" not in r.stderr


THREADED = textwrap.dedent(
    """
    import logging, sys, threading
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    import spanspec
    from spanspec import export
    from spanspec.settings import load_settings
    settings = load_settings({"file_dir": sys.argv[1], "metrics_enabled": False}, env={})
    handle = export.setup(settings, register_atexit=False)
    spanspec.activate(spanspec.load(), "all", tracer_provider=handle.tracer_provider, env_var=None)
    for i in range(3):
        block = spanspec.span("rl.grpo.step", **{"rl.iteration": i})
        block.__enter__()
        t = threading.Thread(target=block.__exit__, args=(None, None, None))
        t.start()
        t.join()
    print(handle.shutdown(10).summary())
    """
)


def test_a_span_ended_in_another_thread_is_one_warning_not_a_traceback(tmp_path):
    r = subprocess.run(
        [sys.executable, "-c", THREADED, str(tmp_path)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "Failed to detach" not in r.stderr, r.stderr
    assert r.stderr.count("ended in another thread") == 1, r.stderr
    assert "3 spans exported" in r.stdout, r.stdout
