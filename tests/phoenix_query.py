"""Read a project's spans back from a Phoenix server with Phoenix's own client; print JSON.

    <stack venv>/bin/python tests/phoenix_query.py BASE_URL PROJECT [ITERATION]

Runs in the observability stack's venv (scripts/observability_stack.sh), where `arize-phoenix`
is installed, not in the project's. Prints ``{"projects": [...], "spans": [{name, span_id,
parent_id, trace_id, span_kind, attributes}], "step": <the step span with rl.iteration=ITERATION or null>}``.
"""

from __future__ import annotations

import json
import sys

from phoenix.client import Client


def main(argv: list[str]) -> int:
    base_url, project = argv[1], argv[2]
    client = Client(base_url=base_url)
    projects = [p["name"] for p in client.projects.list()]
    out: dict = {"projects": projects, "spans": [], "step": None}
    if project in projects:
        spans = client.spans.get_spans(project_identifier=project, limit=100_000)
        out["spans"] = [
            {
                "name": s["name"],
                "span_id": s["context"]["span_id"],
                "trace_id": s["context"]["trace_id"],
                "parent_id": s.get("parent_id"),
                "span_kind": s.get("span_kind"),  # Phoenix's reading of openinference.span.kind
                "attributes": s.get("attributes", {}),
            }
            for s in spans
        ]
        if len(argv) > 3:
            found = client.spans.get_spans(
                project_identifier=project,
                name="rl.grpo.step",
                attributes={"rl.iteration": int(argv[3])},
            )
            out["step"] = found[0] if found else None
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
