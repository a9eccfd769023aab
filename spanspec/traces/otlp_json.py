"""OTLP/JSON trace lines -> simple span records.

The file exporter (:mod:`spanspec.export._file_exporter`) writes ``traces.jsonl``: one OTLP
``ExportTraceServiceRequest`` per line, in the OTLP/JSON encoding. This module reads such files
back into :class:`SpanRecord` objects, flat and easy to test against, with no SDK or protobuf
import. It also accepts what ``google.protobuf.json_format.MessageToJson`` writes for the same
message (base64 ids, enum names, snake_case keys), so a Collector's ``file`` exporter output and
hand-made fixtures read alike.

Problems in a file are findings, never exceptions: a line that is not JSON is a violation, except
a truncated last line (the process was killed mid-write), which is information.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanspec.files import RUN_POINTER, PointerError, read_run_pointer, walk
from spanspec.findings import Finding

__all__ = [
    "TRACE_FILE",
    "SpanLink",
    "SpanRecord",
    "TraceFile",
    "TraceStream",
    "attribute_value",
    "read_spans",
    "read_traces",
    "trace_files",
]

TRACE_FILE = "traces.jsonl"  # what the file exporter writes traces to

# OTLP SpanKind and StatusCode, by number and by protobuf enum name.
_KINDS = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
_STATUS = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
STATUS_ERROR = 2


@dataclass(frozen=True, slots=True)
class SpanLink:
    """A span link: the span (``trace_id``, ``span_id``, lower-case hex) another span points at,
    which may sit in any trace (work done elsewhere that the span used), and its attributes."""

    trace_id: str
    span_id: str
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span from a trace file, with plain Python values.

    Ids are lower-case hex (``trace_id`` 32 digits, ``span_id`` 16); ``parent_span_id`` is None
    for a root. Times are Unix nanoseconds. ``attributes`` and ``resource`` map keys to str, int,
    float, bool, lists of those, or dicts (OTLP ``kvlistValue``). ``file`` and ``line`` say where
    the span was read (1-based line of its export request).
    """

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: Mapping[str, Any] = field(default_factory=dict)
    resource: Mapping[str, Any] = field(default_factory=dict)
    scope: str = ""
    kind: int = 0
    status_code: int = 0
    status_message: str = ""
    file: str = "<unknown>"
    line: int = 0
    dropped_attributes: int = 0  # droppedAttributesCount: lost to the SDK's attribute limits
    links: tuple[SpanLink, ...] = ()
    """The span's links (OTLP ``links``), in file order; a malformed one is left out and named
    by an ``otlp.bad_link`` finding."""

    @property
    def duration_ns(self) -> int:
        """End minus start, never negative."""
        return max(0, self.end_time_unix_nano - self.start_time_unix_nano)

    @property
    def has_possible_times(self) -> bool:
        """Start after 1970, end not before start, both within OTLP's fixed64 nanoseconds: a
        span a reader can place in time (``spanspec live-check`` reports the others)."""
        return 0 < self.start_time_unix_nano <= self.end_time_unix_nano < 2**64

    @property
    def is_error(self) -> bool:
        """Whether the span's status is ERROR."""
        return self.status_code == STATUS_ERROR


@dataclass
class TraceFile:
    """What :func:`read_traces` found: the spans, and a finding for each problem in the files."""

    spans: list[SpanRecord] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    lines: int = 0


def attribute_value(value: Mapping[str, Any] | None) -> Any:
    """Return the Python value of an OTLP ``AnyValue`` (``{"intValue": "3"}`` -> ``3``).

    ``intValue`` (a string in JSON) becomes an int, ``arrayValue`` a list, ``kvlistValue`` a dict,
    ``bytesValue`` stays its base64 text, and an empty value is None.

    Raises:
        ValueError: when the value is not an ``AnyValue`` object or an int does not parse.
    """
    if not isinstance(value, Mapping):
        raise ValueError(f"expected an AnyValue object, got {type(value).__name__}")
    for key, item in value.items():
        if key in ("stringValue", "string_value"):
            return str(item)
        if key in ("intValue", "int_value"):
            return _integer(item, "intValue")
        if key in ("doubleValue", "double_value"):
            return _double(item)
        if key in ("boolValue", "bool_value"):
            return bool(item)
        if key in ("arrayValue", "array_value"):
            return [attribute_value(v) for v in _list(_object(item, key).get("values"), key)]
        if key in ("kvlistValue", "kvlist_value"):
            return _key_values(_object(item, key).get("values", []))
        if key in ("bytesValue", "bytes_value"):
            return str(item)
    return None


def _integer(item: Any, field: str) -> int:
    # OTLP/JSON writes 64-bit integers as decimal strings; a bool or a fraction is not one.
    if isinstance(item, bool) or not isinstance(item, int | str) or not str(item).strip():
        raise ValueError(f"{field} {item!r} is not an integer")
    try:
        return int(item)
    except ValueError:
        raise ValueError(f"{field} {item!r} is not an integer (a decimal string)") from None


def _double(item: Any) -> float:
    # protobuf-JSON writes non-finite doubles as the strings "NaN", "Infinity", "-Infinity".
    try:
        return float(item)
    except (TypeError, ValueError):
        raise ValueError(f"doubleValue {item!r} is not a number") from None


def _key_values(items: Iterable[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if items is not None and not isinstance(items, list):
        raise ValueError("attributes: expected a list of {key, value} objects")
    for item in items or ():
        if not isinstance(item, Mapping) or "key" not in item:
            raise ValueError("expected a list of {key, value} objects")
        try:
            out[str(item["key"])] = attribute_value(item.get("value") or {})
        except ValueError as exc:
            raise ValueError(f"attribute '{item['key']}': {exc}") from None
    return out


def _get(node: Mapping[str, Any], camel: str, snake: str, default: Any = None) -> Any:
    if camel in node:
        return node[camel]
    return node.get(snake, default)


def _hex_id(value: Any, size: int) -> str | None:
    """Hex of an id written as hex (OTLP/JSON) or base64 (protobuf-JSON); None when empty."""
    if not value:
        return None
    text = str(value)
    if len(text) == 2 * size:
        try:
            bytes.fromhex(text)
            return text.lower()
        except ValueError:
            pass
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"id {text!r} is neither hex nor base64") from None
    if len(raw) != size:
        raise ValueError(f"id {text!r} has {len(raw)} bytes, expected {size}")
    return raw.hex() if any(raw) else None


def _enum(value: Any, names: Mapping[str, int]) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return names.get(value, int(value) if value.isdigit() else 0)
    return 0


def _spans_of_request(
    request: Any, file: str, line: int, problems: list[str] | None = None
) -> Iterator[SpanRecord]:
    """Spans of one ``ExportTraceServiceRequest`` dict; what is wrong with a span's links (the
    span is kept without them) is appended to ``problems``.

    Raises:
        ValueError: naming what is malformed.
    """
    if not isinstance(request, Mapping):
        raise ValueError(f"expected a JSON object, got {type(request).__name__}")
    resource_spans = _get(request, "resourceSpans", "resource_spans")
    if not isinstance(resource_spans, list):
        raise ValueError("no 'resourceSpans' list: not an OTLP trace export request")
    for i, rs in enumerate(resource_spans):
        where = f"resourceSpans[{i}]"
        rs = _object(rs, where, optional=False)
        resource = _key_values(_object(rs.get("resource"), f"{where}.resource").get("attributes"))
        scope_spans = _list(_get(rs, "scopeSpans", "scope_spans"), f"{where}.scopeSpans")
        for j, ss in enumerate(scope_spans):
            at = f"{where}.scopeSpans[{j}]"
            ss = _object(ss, at, optional=False)
            scope = str(_object(ss.get("scope"), f"{at}.scope").get("name", ""))
            for k, raw in enumerate(_list(ss.get("spans"), f"{at}.spans")):
                raw = _object(raw, f"{at}.spans[{k}]", False)
                yield _span(raw, resource, scope, file, line, problems)


def _object(value: Any, where: str, optional: bool = True) -> Mapping[str, Any]:
    """``value`` when it is a JSON object (an ``optional`` one may be absent: empty), else a
    plain error naming ``where``."""
    if value is None and optional:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {_json_kind(value)}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a JSON list, got {_json_kind(value)}")
    return value


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {str: "a string", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__
    )


def _span(
    raw: Mapping[str, Any],
    resource: Mapping[str, Any],
    scope: str,
    file: str,
    line: int,
    problems: list[str] | None = None,
) -> SpanRecord:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("a span has no name")
    trace_id = _hex_id(_get(raw, "traceId", "trace_id"), 16)
    span_id = _hex_id(_get(raw, "spanId", "span_id"), 8)
    if trace_id is None or span_id is None:
        raise ValueError(f"span '{name}' has no trace or span id")
    status = _object(raw.get("status"), f"span '{name}': status")
    start = _integer(_get(raw, "startTimeUnixNano", "start_time_unix_nano", 0), "startTimeUnixNano")
    end = _integer(_get(raw, "endTimeUnixNano", "end_time_unix_nano", 0), "endTimeUnixNano")
    return SpanRecord(
        name=name,
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=_hex_id(_get(raw, "parentSpanId", "parent_span_id"), 8),
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=_key_values(raw.get("attributes", [])),
        resource=resource,
        scope=scope,
        kind=_enum(raw.get("kind", 0), _KINDS),
        status_code=_enum(status.get("code", 0), _STATUS),
        status_message=str(status.get("message", "")),
        file=file,
        line=line,
        dropped_attributes=_dropped(raw),
        links=_links(raw.get("links"), name, problems if problems is not None else []),
    )


def _links(raw: Any, name: str, problems: list[str]) -> tuple[SpanLink, ...]:
    """The span's well-formed links; each malformed one becomes a line in ``problems``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append(f"span '{name}': links: expected a JSON list, got {_json_kind(raw)}")
        return ()
    out = []
    for i, item in enumerate(raw):
        try:
            item = _object(item, "", optional=False)
            trace_id = _hex_id(_get(item, "traceId", "trace_id"), 16)
            span_id = _hex_id(_get(item, "spanId", "span_id"), 8)
            if trace_id is None or span_id is None:
                raise ValueError("no trace or span id")
            attributes = _key_values(item.get("attributes", []))
        except (ValueError, TypeError, AttributeError, RecursionError) as exc:
            why = (
                str(exc).lstrip(": ")
                if isinstance(exc, ValueError)
                else "a value of the wrong kind"
            )
            problems.append(f"span '{name}': links[{i}]: {why}; the link is left out")
            continue
        out.append(SpanLink(trace_id, span_id, attributes))
    return tuple(out)


def _dropped(raw: Mapping[str, Any]) -> int:
    try:
        return max(0, int(_get(raw, "droppedAttributesCount", "dropped_attributes_count", 0) or 0))
    except (TypeError, ValueError):
        return 0


def trace_files(path: str | os.PathLike[str]) -> tuple[list[Path], list[Finding]]:
    """The trace files PATH stands for, and what could not be looked into.

    PATH is a file (itself), a folder holding ``traces.jsonl`` (that file), a folder whose run
    pointer (:data:`~spanspec.files.RUN_POINTER`) names a ``traces`` folder (the files of that
    folder, by this rule but without following a pointer again), or a folder above (a run folder
    holds ``telemetry/traces.jsonl``): every ``traces.jsonl`` below it. A folder below that cannot
    be listed is a ``file.unreadable`` finding; a pointer that cannot be read or leads nowhere a
    ``file.bad_pointer`` violation; a folder with no trace file and no pointer a
    ``file.no_traces`` violation saying how to get one.
    """
    return _trace_files(Path(path), follow=True)


def _trace_files(p: Path, follow: bool) -> tuple[list[Path], list[Finding]]:
    if not p.is_dir():
        return [p], []
    if (p / TRACE_FILE).exists():
        return [p / TRACE_FILE], []
    if follow:
        try:
            pointer = read_run_pointer(p)
            target = pointer.trace_folder() if pointer is not None else None
        except PointerError as exc:
            return [], [Finding("file.bad_pointer", str(exc), file=str(p / RUN_POINTER))]
        if target is not None:
            files, findings = _trace_files(target, follow=False)
            if not files and not findings:
                findings = [_no_traces(target, f"; {p / RUN_POINTER} points here")]
            return files, findings
    files: list[Path] = []
    findings: list[Finding] = []
    for found, finding in walk(p, (TRACE_FILE,)):
        if finding is not None:
            findings.append(finding)
        elif found.name == TRACE_FILE:
            files.append(found)
    if not files and not findings:
        findings.append(_no_traces(p, f", and no {RUN_POINTER} saying where they went"))
    return files, findings


def _no_traces(folder: Path, why: str) -> Finding:
    return Finding(
        "file.no_traces",
        f"no {TRACE_FILE} in this folder or below it{why}; run with telemetry.exporter=file "
        "(or auto without an OTLP endpoint) to write one",
        file=str(folder),
    )


def existing_trace_files(path: str | os.PathLike[str]) -> list[Path]:
    """The trace files PATH names, for a reader that needs at least one.

    Raises:
        ValueError: one line, when PATH does not exist, holds no trace file, or cannot be
            looked into.
    """
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{p}: no such file or folder (expected a {TRACE_FILE} or a run folder)")
    files, problems = trace_files(p)
    if problems:
        raise ValueError(str(problems[0]))
    return files


class TraceStream:
    """The spans of trace files, read one line at a time: memory holds one export request.

    Iterating yields every span that can be read, file after file in file order;
    :meth:`merged` yields them across files in order of their end time (each process's file is
    written in that order), which is what a reader that closes a step once time has moved past
    it needs. ``findings``, ``files``, ``lines`` and ``bytes`` fill in as the files are read
    (see :func:`read_traces` for the findings). Never raises for bad input.
    """

    def __init__(self, paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> None:
        if isinstance(paths, str | os.PathLike):
            paths = [paths]
        self.findings: list[Finding] = []
        self.files: list[str] = []
        self.lines = 0
        self.bytes = 0
        self._paths: list[Path] = []
        for given in paths:
            found, problems = trace_files(given)
            self._paths += found
            self.findings += problems

    @property
    def paths(self) -> list[Path]:
        """The trace files the given paths stand for."""
        return list(self._paths)

    def __iter__(self) -> Iterator[SpanRecord]:
        for path in self._paths:
            yield from self._read_file(path)

    def merged(self) -> Iterator[SpanRecord]:
        """The spans of every file, merged by end time (file order within a file)."""
        return heapq.merge(
            *(self._read_file(p) for p in self._paths), key=lambda s: s.end_time_unix_nano
        )

    def _read_file(self, path: Path) -> Iterator[SpanRecord]:
        name = str(path)
        self.files.append(name)
        try:
            if Path(path).exists() and not Path(path).is_file():  # a folder, FIFO, /dev/zero
                raise IsADirectoryError(0, "not a regular file")
            handle = open(path, encoding="utf-8", errors="replace", newline="\n")
        except OSError as exc:
            self.findings.append(
                Finding("file.unreadable", f"cannot read file: {exc.strerror}", file=name)
            )
            return
        found = 0
        with handle:
            try:
                for index, line_text in enumerate(handle):
                    self.bytes += len(line_text)
                    if not line_text.strip():
                        continue
                    self.lines += 1
                    # Only a last line without its newline was cut short by a writer that
                    # stopped; a bad line that ends in a newline (a torn write with more after
                    # it) is lost data.
                    spans = self._parse(line_text, name, index + 1, not line_text.endswith("\n"))
                    found += len(spans)
                    yield from spans
            except OSError as exc:
                self.findings.append(
                    Finding("file.unreadable", f"cannot read file: {exc.strerror}", file=name)
                )
                return
        if not found and not any(f.file == name and f.level == "violation" for f in self.findings):
            self.findings.append(
                Finding(
                    "otlp.empty",
                    "the file holds no spans",
                    level="information",
                    file=name,
                    line=1,
                    col=1,
                )
            )

    def _parse(self, line_text: str, name: str, number: int, last: bool) -> list[SpanRecord]:
        try:
            request = json.loads(line_text)
        except RecursionError:
            self.findings.append(
                Finding(
                    "otlp.invalid_json",
                    "line is nested too deeply to read (not an OTLP export request)",
                    file=name,
                    line=number,
                    col=1,
                )
            )
            return []
        except json.JSONDecodeError as exc:
            if last:
                self.findings.append(
                    Finding(
                        "otlp.truncated_line",
                        f"the last line is not complete JSON ({exc.msg}); the writer was "
                        "probably stopped mid-line, so its spans are skipped",
                        level="information",
                        file=name,
                        line=number,
                        col=exc.colno,
                    )
                )
            else:
                self.findings.append(
                    Finding(
                        "otlp.invalid_json",
                        f"line is not JSON: {exc.msg}",
                        file=name,
                        line=number,
                        col=exc.colno,
                    )
                )
            return []
        problems: list[str] = []
        try:
            spans = list(_spans_of_request(request, name, number, problems))
        except (ValueError, TypeError, AttributeError, RecursionError) as exc:
            message = "nested too deeply" if isinstance(exc, RecursionError) else f"{exc}"
            if isinstance(exc, TypeError | AttributeError):  # not Python's words
                message = "not an OTLP trace export request: a value of the wrong kind"
            self.findings.append(Finding("otlp.malformed", message, file=name, line=number, col=1))
            return []
        for problem in problems:  # the spans are read; only these links are lost
            self.findings.append(
                Finding(
                    "otlp.bad_link", problem, level="improvement", file=name, line=number, col=1
                )
            )
        return spans


def read_traces(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> TraceFile:
    """Read trace files of OTLP/JSON lines; a folder stands for the files :func:`trace_files`
    finds in it. This holds every span in memory; a reader that keeps only aggregates iterates
    a :class:`TraceStream` instead.

    Returns:
        A :class:`TraceFile` with every span that could be read, in file order, and findings:
        ``file.unreadable`` and ``otlp.invalid_json`` / ``otlp.malformed`` (violations) for a
        missing file or a bad line (a torn line with more after it included),
        ``otlp.truncated_line`` (information) for a last line cut short without its newline,
        ``otlp.empty`` (information) for a file without spans. Never raises for bad input.
    """
    stream = TraceStream(paths)
    spans = list(stream)
    return TraceFile(spans=spans, findings=stream.findings, files=stream.files, lines=stream.lines)


def read_spans(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
) -> list[SpanRecord]:
    """Return the spans of trace files, skipping what cannot be read (see :func:`read_traces`)."""
    return read_traces(paths).spans
