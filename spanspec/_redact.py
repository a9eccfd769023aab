"""Credentials out of text: a URL's userinfo (``user:password@``), its query string and its
fragment are replaced by ``***`` wherever an endpoint or a configured value is shown (logs,
tables, errors, files). A leaf module: it imports nothing of spanspec.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

# scheme://netloc... up to whitespace, a quote or an angle bracket
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]*")
# user[:password]@ at the start of a bare host:port (the gRPC exporter takes those too)
_BARE_USERINFO = re.compile(r"^[^\s/@'\"]+@(?=[^\s@]+$)")
# user[:password]@host:port inside text (gRPC's own error details name the target so)
_USERINFO_IN_TEXT = re.compile(r"(?<![\w*])[^\s/@'\"\[\]()]+@(?=[\w\-.]+:\d+)")
# /path?query inside text (urllib3's "Max retries exceeded with url: /v1/traces?token=...")
_PATH_QUERY_IN_TEXT = re.compile(r"(?<![\w*])(/[^\s?'\"]*)\?[^\s'\"#]*")
# host:port?query inside text
_QUERY_IN_TEXT = re.compile(r"(?<=:\d)(\d*)(/[^\s?'\"]*)?\?[^\s'\"#]*")


def redact_url(url: str) -> str:
    """Return ``url`` with its userinfo, query string and fragment masked.

    ``http://bob:pw@h:4317/v1/traces?token=x`` gives ``http://***@h:4317/v1/traces?***``; a
    bare ``bob:pw@h:4317`` gives ``***@h:4317``. Text without any of those is returned as is.
    """
    if "://" not in url:
        return _mask_tail(_BARE_USERINFO.sub(f"{MASK}@", url))
    scheme, _, rest = url.partition("://")
    cut = len(rest)
    for sep in "/?#":
        at = rest.find(sep)
        if at != -1:
            cut = min(cut, at)
    netloc, tail = rest[:cut], rest[cut:]
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
    return f"{scheme}://{netloc}{_mask_tail(tail)}"


def _mask_tail(tail: str) -> str:
    query = tail.find("?")
    fragment = tail.find("#")
    if query != -1 and (fragment == -1 or query < fragment):
        return f"{tail[:query]}?{MASK}"
    if fragment != -1:
        return f"{tail[:fragment]}#{MASK}"
    return tail


def scrub(text: str) -> str:
    """Return ``text`` with every URL in it redacted (see :func:`redact_url`)."""
    if "://" not in text and "@" not in text and "?" not in text:
        return text
    if "://" not in text and " " not in text.strip():
        return redact_url(text)
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    text = _USERINFO_IN_TEXT.sub(f"{MASK}@", text)
    text = _PATH_QUERY_IN_TEXT.sub(lambda m: f"{m.group(1)}?{MASK}", text)
    return _QUERY_IN_TEXT.sub(lambda m: f"{m.group(1)}{m.group(2) or ''}?{MASK}", text)


def scrub_value(value: Any) -> Any:
    """``value`` (a log record's argument) with URLs redacted: text scrubbed, and any other
    object whose text would show credentials replaced by that text, scrubbed."""
    if isinstance(value, str):
        return scrub(value)
    if value is None or isinstance(value, (int, float)):
        return value
    try:
        text = str(value)
    except Exception:
        return value
    clean = scrub(text)
    return value if clean == text else clean
