"""`spanspec report` opened in a real browser (Debian's headless Chromium, from disk, no network):
the page runs without a console message, its DOM holds the run's phases, steps, processes and
numbers, a link can pick a step and a span, and a screenshot is written for people to look at
(``results/report.png``, or ``$SPANSPEC_REPORT_SCREENSHOT``)."""

from __future__ import annotations

import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import spanspec
from spanspec.traces.report import write_report
from tests.unit.spanspec.fixtures.traces import split_worker_spans, write_traces

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium (scripts/setup.sh installs it as root)"
)
STEPS = 4
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
]


def _emit(tracer) -> None:
    for i in range(STEPS):
        it = {"rl.iteration": i}
        with spanspec.span("rl.grpo.step", **it, **{"rl.algorithm": "grpo"}):
            with spanspec.span("rl.grpo.rollout", **it):
                with spanspec.span("rl.grpo.generation", **it, **{"rl.batch_size": 8}):
                    with spanspec.span(
                        "rl.worker.generate",
                        **{
                            "gen_ai.provider.name": "torch",
                            "gen_ai.operation.name": "text_completion",
                            "gen_ai.usage.output_tokens": 100 + i,
                        },
                    ):
                        time.sleep(0.004 * (i + 1))
                with spanspec.span("rl.grpo.reward", **it):
                    time.sleep(0.001)
            with spanspec.span("rl.grpo.policy_update", **it):
                with spanspec.span("rl.worker.train_microbatch", **{"rl.micro_batch": 0}):
                    time.sleep(0.003)
            with spanspec.span("rl.grpo.weight_sync", **it):
                time.sleep(0.001)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    traces = write_traces(
        run / "telemetry",
        _emit,
        groups="per_step",
        resource={"rl.run_id": "run-b", "rl.model": "m"},
    )
    split_worker_spans(traces, {"rl.worker.group": "policy", "rl.worker.rank": 0})
    # The run's logged scalars, as the logger writes them: the registry's from: keys get curves.
    rows = [
        {"step": i, "train/reward_mean": 0.1 * i, "train/loss": 2.0 - 0.5 * i, "x/unknown": 1}
        | ({"validation/accuracy": 0.25 * i} if i % 2 == 0 else {})
        | {"train/tokens_per_sec": 1000.0 + i}
        for i in range(STEPS)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = run / "report.html"
    data = write_report(run, out)
    return out, data


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


class _Dom(html.parser.HTMLParser):
    """Ids, texts by element id, and `data-*` attribute values of a dumped DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.text_by_id: dict[str, str] = {}
        self.data: dict[str, list[str]] = {}
        self.body: dict[str, str] = {}
        self._open: list[str | None] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for k, v in attrs.items():
            if k.startswith("data-"):
                self.data.setdefault(k, []).append(v or "")
        if tag == "body":
            self.body = attrs
        self._open.append(attrs.get("id"))
        if attrs.get("id"):
            self.text_by_id.setdefault(attrs["id"], "")

    def handle_endtag(self, tag):
        if self._open:
            self._open.pop()

    def handle_data(self, text):
        for element_id in filter(None, self._open):
            self.text_by_id[element_id] += text


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def _ms(x: float) -> str:  # the page's own formatting
    return f"{x / 1000:.2f} s" if x >= 1000 else f"{x:.1f} ms"


def test_the_page_is_self_contained(report):
    out, _ = report
    text = out.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "<link" not in text and "@import" not in text and "fetch(" not in text
    assert len(text.encode()) < 200_000


def test_page_loads_without_console_messages_and_shows_the_run(report, tmp_path):
    out, data = report
    done = chromium("--dump-dom", out.as_uri(), profile=tmp_path / "profile")
    assert done.returncode == 0, done.stderr[-2000:]
    assert _console(done.stderr) == []
    dom = _Dom()
    dom.feed(done.stdout)
    assert dom.body.get("data-ready") == "true"
    assert dom.text_by_id["errors"].strip() == ""
    texts = dom.text_by_id
    assert "run run-b" in texts["title"]
    assert f"{STEPS} steps" in texts["meta"] and "2 processes" in texts["meta"]
    # The breakdown table: every phase with the Python-side mean.
    for phase in data["breakdown"]["phases"]:
        assert phase["name"] in texts["breakdown"]
        assert _ms(1000 * phase["mean_s"]) in texts["breakdown"]
    assert set(dom.data["data-phase"]) >= {"rl.grpo.rollout", "rl.grpo.policy_update"}
    assert "productive" in dom.data["data-bucket"]
    # One option per step, the slowest first in the list and picked.
    assert texts["step-picker"].count("step ") == STEPS
    slowest = data["steps"][data["slowest"][0]]
    assert texts["slowest"].startswith(f"steptimevs mean{slowest['iteration']}")
    assert _ms(slowest["dur_ms"]) in texts["step-meta"]
    # The waterfall: one lane per process, every span of the step drawn.
    assert dom.data["data-lane"] == ["driver", "policy 0"]
    drawn = dom.data["data-name"]
    assert sorted(drawn) == sorted(s["name"] for s in slowest["spans"])
    assert {"rl.grpo.step", "rl.worker.generate", "rl.worker.train_microbatch"} <= set(drawn)


def test_a_link_picks_a_step_and_shows_a_spans_attributes(report, tmp_path):
    out, data = report
    url = out.as_uri() + "#step=1&span=rl.worker.generate"
    done = chromium("--dump-dom", url, profile=tmp_path / "profile")
    assert _console(done.stderr) == []
    dom = _Dom()
    dom.feed(done.stdout)
    step = data["steps"][1]
    assert _ms(step["dur_ms"]) in dom.text_by_id["step-meta"]
    attrs = dom.text_by_id["attrs-json"]
    assert '"gen_ai.usage.output_tokens": 101' in attrs and '"process": "policy 0"' in attrs


def test_screenshot(report, tmp_path):
    out, _ = report
    shot = Path(os.environ.get("SPANSPEC_REPORT_SCREENSHOT", ROOT / "results" / "report.png"))
    shot.parent.mkdir(parents=True, exist_ok=True)
    done = chromium(
        "--window-size=1400,1200", f"--screenshot={shot}", out.as_uri(), profile=tmp_path / "p"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_the_cli_writes_the_report_and_names_bad_input(report, tmp_path):
    out, _ = report
    run = out.parent
    cmd = [sys.executable, "-m", "spanspec.cli", "report", str(run), "-o", str(tmp_path / "r.html")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "r.html").stat().st_size > 10_000
    assert "r.html" in done.stdout
    bad = subprocess.run(
        [*cmd[:4], str(tmp_path / "nowhere")], capture_output=True, text=True, cwd=ROOT
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "nowhere: no such file or folder" in bad.stderr


def test_a_report_against_a_baseline_shows_the_comparison_and_both_curves(report, tmp_path):
    out, _ = report
    base = tmp_path / "base"
    traces = write_traces(
        base / "telemetry", _emit, groups="per_step", resource={"rl.run_id": "run-a"}
    )
    split_worker_spans(traces, {"rl.worker.group": "policy", "rl.worker.rank": 0})
    page = tmp_path / "against.html"
    cmd = [sys.executable, "-m", "spanspec.cli", "report", str(out.parent), "-o", str(page)]
    done = subprocess.run(
        [*cmd, "--baseline", str(base)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert "against baseline run run-a" in done.stdout
    shown = chromium("--dump-dom", page.as_uri(), profile=tmp_path / "profile")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert _console(shown.stderr) == []
    dom = _Dom()
    dom.feed(shown.stdout)
    assert dom.body.get("data-ready") == "true"
    assert dom.text_by_id["errors"].strip() == ""
    assert "baseline run run-a" in dom.text_by_id["baseline-meta"]
    assert "Mann-Whitney U" in dom.text_by_id["baseline-meta"]
    phases = set(dom.data["data-compare-phase"])
    assert {"step", "rl.grpo.rollout", "rl.grpo.generation", "rl.grpo.policy_update"} <= phases
    assert set(dom.data["data-verdict"]) <= {"slower", "faster", "same"}
    # both runs' step times on one chart (the metric curves carry data-curve too)
    assert {"baseline", "this run"} <= set(dom.data["data-curve"])
    # A baseline that diff refuses is one line, exit 2.
    bad = subprocess.run(
        [*cmd, "--baseline", str(tmp_path / "nowhere")], capture_output=True, text=True, cwd=ROOT
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "--baseline:" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


CURVES = ("train/reward_mean", "train/loss", "train/tokens_per_sec", "validation/accuracy")


def test_the_metric_curves_are_drawn_per_step_and_follow_the_step_picker(report, tmp_path):
    out, data = report
    assert sorted(c["key"] for c in data["curves"]) == sorted(CURVES)  # not x/unknown
    accuracy = next(c for c in data["curves"] if c["key"] == "validation/accuracy")
    assert accuracy["points"] == [[0, 0.0], [2, 0.5]]
    done = chromium("--dump-dom", out.as_uri() + "#step=2", profile=tmp_path / "profile")
    assert _console(done.stderr) == []
    dom = _Dom()
    dom.feed(done.stdout)
    assert dom.body.get("data-ready") == "true" and dom.text_by_id["errors"].strip() == ""
    assert sorted(dom.data["data-curve"]) == sorted(CURVES)
    for key in CURVES:  # each curve titled with the logger's key
        assert re.search(f"<h3[^>]*>{re.escape(key)}</h3>", done.stdout), key
    # One point per logged step (4 + 4 + 4 + 2), and the picked step's points marked.
    assert len(re.findall(r'<circle[^>]*class="point', done.stdout)) == 3 * STEPS + 2
    picked = re.findall(r'<circle[^>]*class="point picked"[^>]*data-step="(\d+)"', done.stdout)
    assert picked == ["2"] * len(CURVES)


def test_steps_logged_as_steps_done_link_to_the_span_one_below(report, tmp_path):
    """A program that logs the steps done (1-based) while its step spans count from 0: logged
    step n is step span n - 1, for the picker and the marks alike."""
    out, _ = report
    done_rows = tmp_path / "done.jsonl"
    done_rows.write_text(
        "".join(
            json.dumps({"step": i + 1, "train/loss": 1.0 / (i + 1)}) + "\n" for i in range(STEPS)
        )
    )
    page = tmp_path / "done.html"
    data = write_report(out.parent, page, metrics_file=done_rows)
    assert data["curve_step_offset"] == 1
    done = chromium("--dump-dom", page.as_uri() + "#step=2", profile=tmp_path / "profile")
    assert _console(done.stderr) == []
    picked = re.findall(r'<circle[^>]*class="point picked"[^>]*data-step="(\d+)"', done.stdout)
    assert picked == ["3"]


def test_the_step_chart_fits_150_steps_and_the_waterfall_zooms(tmp_path):
    def emit(tracer) -> None:
        for i in range(160):
            with spanspec.span("rl.grpo.step", **{"rl.iteration": i, "rl.algorithm": "grpo"}):
                with spanspec.span("rl.grpo.policy_update", **{"rl.iteration": i}):
                    pass

    traces = write_traces(tmp_path / "long" / "telemetry", emit, groups="per_step")
    page = tmp_path / "long.html"
    write_report(traces.parent, page)
    done = chromium(
        "--window-size=1000,900", "--dump-dom", page.as_uri() + "#step=3&zoom=4",
        profile=tmp_path / "profile",
    )  # fmt: skip
    assert _console(done.stderr) == []
    dom = _Dom()
    dom.feed(done.stdout)
    assert dom.body.get("data-ready") == "true" and dom.text_by_id["errors"].strip() == ""
    chart = re.search(r'<svg[^>]*id="steps-svg"[^>]*>', done.stdout).group(0)
    assert int(re.search(r'width="(\d+)', chart).group(1)) <= 1000  # inside the window
    assert len(re.findall(r'<g class="bar[^"]*" data-step=', done.stdout)) == 160
    # The zoom: its buttons and reset are on the page; #zoom=4 shows a quarter of the step.
    for button in ("zoom-in", "zoom-out", "zoom-reset"):
        assert button in dom.text_by_id
    assert dom.data["data-zoom"] == ["4.00"] and "zoom 4.0\u00d7" in dom.text_by_id["zoom-meta"]
