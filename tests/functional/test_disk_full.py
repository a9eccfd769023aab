"""The file exporter on a disk that fills and then frees: a small tmpfs mounted in a private mount
namespace (``unshare -m``, root only), so nothing outside the test sees it.

A good batch, then a batch whose write fails part-way (disk full), then space is freed and a good
batch again: both good batches must be in the file, intact; the torn line counts as exactly the
spans of the failed batch; ``live-check`` reports the torn line as a violation.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spanspec.traces.otlp_json import read_traces

ROOT = Path(__file__).resolve().parents[2]
GOOD, FAILED = 5, 200

CHILD = textwrap.dedent(
    f"""
    import json, os, sys
    import spanspec
    from spanspec import export
    from spanspec.settings import load_settings

    folder = sys.argv[1]
    settings = load_settings({{"file_dir": folder, "metrics_enabled": False}}, env={{}})
    handle = export.setup(settings, register_atexit=False)
    spanspec.activate(spanspec.load(), "all", tracer_provider=handle.tracer_provider, env_var=None)

    def burst(first, count):
        for i in range(first, first + count):
            with spanspec.span("rl.worker.train_microbatch", **{{"rl.micro_batch": i}}):
                pass
        handle.force_flush(5)

    burst(0, {GOOD})
    filler = os.path.join(folder, "filler")
    with open(filler, "wb", buffering=0) as f:  # fill the disk to the last byte
        try:
            while True:
                f.write(b"x" * 4096)
        except OSError:
            pass
    os.truncate(filler, max(0, os.path.getsize(filler) - 4096))  # one page left: a torn write
    burst(100, {FAILED})
    os.remove(filler)  # space again
    burst(1000, {GOOD})
    stats = handle.shutdown(5)
    (traces,) = [p for p in stats.pipelines if p.signal == "traces"]
    print(json.dumps({{"exported": traces.exported, "failed": traces.failed, "lost": traces.lost}}))
    """
)


def _can_mount() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return probe.returncode == 0


def _in_private_mount_namespace(shell: str) -> subprocess.CompletedProcess:
    """Run ``shell`` where its mounts are seen by nothing else (and vanish with it)."""
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", shell],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


@pytest.mark.skipif(not _can_mount(), reason="needs root and unshare -m for a private tmpfs")
def test_a_disk_that_fills_then_frees_loses_only_the_failed_batch(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    disk = tmp_path / "disk"
    disk.mkdir()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    shell = (
        f"mount -t tmpfs -o size=256k tmpfs {disk} && "
        f"{sys.executable} {script} {disk} > {out}/stats.json && cp {disk}/traces.jsonl {out}/"
    )
    r = _in_private_mount_namespace(shell)
    assert r.returncode == 0, r.stderr
    stats = json.loads((out / "stats.json").read_text())
    assert stats == {"exported": 2 * GOOD, "failed": FAILED, "lost": FAILED}

    traces = read_traces(out / "traces.jsonl")
    seen = sorted(s.attributes["rl.micro_batch"] for s in traces.spans)
    assert seen == [*range(GOOD), *range(1000, 1000 + GOOD)]  # both good batches, whole
    torn = [f for f in traces.findings if f.level == "violation"]
    assert [f.id for f in torn] == ["otlp.invalid_json"] and torn[0].line == 2

    check = subprocess.run(
        [str(Path(sys.executable).parent / "spanspec"), "live-check", str(out / "traces.jsonl")],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 1
    assert "traces.jsonl:2:" in check.stdout + check.stderr


def test_spanspec_docs_on_a_full_disk_keeps_the_previous_reference(tmp_path):
    if not _can_mount():
        pytest.skip("needs root and unshare -m for a private tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    spanspec_cli = Path(sys.executable).parent / "spanspec"
    shell = (
        f"mount -t tmpfs -o size=64k tmpfs {disk} && printf 'previous\\n' > {disk}/reference.md && "
        f"(dd if=/dev/zero of={disk}/filler bs=4k 2>/dev/null; true) && "
        f"{spanspec_cli} docs --out {disk}; echo rc=$? && cat {disk}/reference.md && "
        f"ls -a {disk}"
    )
    r = _in_private_mount_namespace(shell)
    out = r.stdout + r.stderr
    assert "rc=2" in out, out
    assert "cannot write" in out and "Traceback" not in out
    assert "\nprevious\n" in r.stdout  # the old file, whole
    assert ".reference.md." not in r.stdout  # no temporary file left behind


def _grpo_trace(folder: Path) -> Path:
    from tests.unit.spanspec.fixtures.traces import grpo_steps, write_traces

    return write_traces(folder, grpo_steps(3))


@pytest.mark.parametrize(
    "command",
    [
        ["report", "{trace}", "-o", "{disk}/out.html"],
        ["view", "{trace}", "--format", "chrome", "-o", "{disk}/out.html"],
    ],
    ids=["report", "view-chrome"],
)
def test_a_full_disk_keeps_the_previous_output_of_report_and_view(tmp_path, command):
    if not _can_mount():
        pytest.skip("needs root and unshare -m for a private tmpfs")
    trace = _grpo_trace(tmp_path / "run")
    disk = tmp_path / "disk"
    disk.mkdir()
    spanspec_cli = Path(sys.executable).parent / "spanspec"
    args = " ".join(a.format(trace=trace, disk=disk) for a in command)
    shell = (
        f"mount -t tmpfs -o size=64k tmpfs {disk} && printf 'previous\\n' > {disk}/out.html && "
        f"(dd if=/dev/zero of={disk}/filler bs=4k 2>/dev/null; true) && "
        f"{spanspec_cli} {args}; echo rc=$? && cat {disk}/out.html && ls -a {disk}"
    )
    r = _in_private_mount_namespace(shell)
    out = r.stdout + r.stderr
    assert "rc=2" in out, out
    assert "cannot write" in out and "No space left" in out and "Traceback" not in out, out
    assert "\nprevious\n" in r.stdout  # the old file, whole
    assert ".out.html." not in r.stdout  # no temporary file left behind
