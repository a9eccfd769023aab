"""The OpenTelemetry GenAI semantic conventions as this stack emits them, and their transition.

The conventions renamed ``gen_ai.system`` to ``gen_ai.provider.name``. We emit the current name;
``OTEL_SEMCONV_STABILITY_OPT_IN`` (a comma list, the variable OpenTelemetry's transition rule
names for moving between convention versions) holding ``gen_ai/dup`` adds the old name next to
it, for dashboards still built on ``gen_ai.system``, in the way ``http/dup`` did for HTTP.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["OPT_IN_VARIABLE", "emits_old_names", "provider_attributes"]

OPT_IN_VARIABLE = "OTEL_SEMCONV_STABILITY_OPT_IN"
_DUP = "gen_ai/dup"


def emits_old_names(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``$OTEL_SEMCONV_STABILITY_OPT_IN`` asks for the old GenAI names too."""
    value = (os.environ if env is None else env).get(OPT_IN_VARIABLE, "")
    return _DUP in {word.strip() for word in value.split(",")}


def provider_attributes(provider: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{"gen_ai.provider.name": provider}``, plus ``gen_ai.system`` while
    :func:`emits_old_names`."""
    attributes = {"gen_ai.provider.name": provider}
    if emits_old_names(env):
        attributes["gen_ai.system"] = provider
    return attributes
