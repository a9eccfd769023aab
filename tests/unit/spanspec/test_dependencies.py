"""The runtime stands on opentelemetry-api alone: cheap to import, usable without the SDK."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCK_SDK = textwrap.dedent(
    """
    import importlib.abc, sys
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[:2] == ["opentelemetry", "sdk"]:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
    sys.meta_path.insert(0, Block())
    """
)


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_loads_no_sdk_pydantic_yaml_torch_or_ray():
    out = _run(
        "import sys, spanspec\n"
        "heavy = ['opentelemetry.sdk', 'pydantic', 'yaml', 'torch', 'ray', 'nemo_rl']\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    assert out == "[]"


def test_span_and_activate_work_without_the_sdk():
    out = _run(
        BLOCK_SDK
        + textwrap.dedent(
            """
            import spanspec
            from spanspec import propagate
            spec = spanspec.load()
            spanspec.activate(spec, groups="all", env_var=None)
            with spanspec.span("rl.grpo.step", **{"rl.iteration": 1}) as s:
                print(type(s).__name__, propagate.inject() == {})
            try:
                import opentelemetry.sdk
            except ModuleNotFoundError:
                print("sdk blocked")
            """
        )
    )
    assert out.splitlines() == ["NonRecordingSpan True", "sdk blocked"]
