"""bench/bench_scale.py, small: 8 workers on 3 Ray nodes, through rotel, judged from what the
collector delivered (no drops, every parent present, one trace per step, one exporting rank per
node under first_rank_per_node)."""

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.collector import AGENT

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.skipif(AGENT is None, reason="rotel ships no agent binary for this platform"),
]

ROOT = Path(__file__).resolve().parents[2]
WORKERS, NODES, STEPS, MICRO = 8, 3, 2, 2
# Driver phases per step, and each worker's spans per step: generate, logprob x2 (policy and
# reference), train_microbatch x MICRO, optimizer_step, update_weights.
DRIVER_SPANS, WORKER_SPANS = 10, 5 + MICRO


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    out = tmp_path_factory.mktemp("scale") / "cases.json"
    proc = subprocess.run(
        [
            sys.executable,
            "bench/bench_scale.py",
            f"--workers={WORKERS}",
            f"--nodes={NODES}",
            f"--steps={STEPS}",
            "--step-s=0.3",
            f"--micro-batches={MICRO}",
            "--strategies=all_ranks,first_rank_per_node",
            "--presets=per_step",
            f"--json={out}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "orphans" in proc.stdout  # the table was printed
    return {c["strategy"]: c for c in json.loads(out.read_text())}


def test_all_ranks_delivers_every_span_with_its_parent(cases):
    c = cases["all_ranks"]
    assert c["dropped"] == 0
    assert c["spans"] == c["spans_exported"] == STEPS * (DRIVER_SPANS + WORKERS * WORKER_SPANS)
    assert c["orphans"] == 0
    assert c["traces"] == STEPS  # per_step: each step is its own trace, workers included
    assert c["ranks_received"] == list(range(WORKERS))


def test_first_rank_per_node_exports_one_rank_on_each_node(cases):
    c = cases["first_rank_per_node"]
    nodes = {int(rank): node for rank, node in c["rank_nodes"].items()}
    assert len(set(nodes.values())) == c["nodes"] > 1  # real, distinct Ray node ids
    assert c["exporting_ranks"] == c["ranks_received"]
    assert Counter(nodes[r] for r in c["ranks_received"]) == dict.fromkeys(set(nodes.values()), 1)
    assert c["dropped"] == 0 and c["orphans"] == 0 and c["traces"] == STEPS
    assert c["spans"] == STEPS * (DRIVER_SPANS + c["nodes"] * WORKER_SPANS)
