"""The README's figures: each is a line its command prints (tests/readme_figures.py).

The CI-size commands are rerun by the functional tests that already run them
(test_ppo_run.py, test_distillation_run.py: `check_ci_figures`); here, the blocks are read (every
quoted number sits in a marked block, none drifts in the prose), and, with
``NEMO_RL_README_FULL=1``, each full-size command is rerun in a fresh folder (minutes each) and
its figures checked.
"""

from __future__ import annotations

import os
import re
import shlex

import pytest

from tests.readme_figures import ABS_MARGIN, README, REL_MARGIN, mismatches, quotes
from tests.traces import run_example

FULL = os.environ.get("NEMO_RL_README_FULL") == "1"


def test_every_quoted_figure_sits_in_a_marked_block_with_its_command():
    found = quotes()
    full = [q for q in found if q.size == "full"]
    ci = [q for q in found if q.size == "ci"]
    assert full and ci
    assert all(q.lines and q.command.startswith("python examples/run_") for q in found)
    # Each full-size command has its CI-size twin, which a functional test reruns.
    assert {q.command.split()[1] for q in full} == {q.command.split()[1] for q in ci}
    # The loop list quotes no figure of its own: the figures live in the marked blocks only.
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Running a loop") : text.index("<!-- figures: full -->")]
    loops = section[section.index("```bash") : section.index("```\n\n")]
    assert not re.findall(r"\d\.\d|->", loops), f"a figure outside the marked blocks: {loops}"
    # The margin the README states is the one checked.
    assert f"{ABS_MARGIN:g} or {REL_MARGIN:.0%}".replace("%", " %") in " ".join(text.split())


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="minutes per loop: set NEMO_RL_README_FULL=1")
@pytest.mark.parametrize(
    "quote", [q for q in quotes() if q.size == "full"], ids=lambda q: q.command.split()[1]
)
def test_a_full_size_command_prints_its_quoted_figures(quote, tmp_path):
    _, script, *args = shlex.split(quote.command)
    proc = run_example(
        script.removeprefix("examples/"), *args, f"logger.log_dir={tmp_path}", timeout=3600
    )
    problems = mismatches(quote, proc.stdout + proc.stderr)
    assert not problems, "\n".join(problems)
