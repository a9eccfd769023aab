"""The ``spanspec`` command line: check | groups | docs | schema | live-check | view.

Every problem is a finding printed as ``file:line:col: level: id: message`` (or JSON with
``--format json``), all of them in one run. Exit codes:

- 0: no violation (improvements and information may have been printed);
- 1: at least one violation, or nothing to show (``view`` of a file without spans);
- 2: a usage error (bad option, unknown group in ``--groups``), one line on stderr;
- 3: a bug in spanspec, one line on stderr (``SPANSPEC_DEBUG=1`` shows the traceback).

The user never sees a traceback otherwise.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from spanspec.compile import Spec, compile_registry, default_registry_path
from spanspec.findings import Finding, SpecError, did_you_mean

if TYPE_CHECKING:
    from spanspec.loader import Located

__all__ = ["main"]

_LEVELS = ("information", "improvement", "violation")
_REGISTRY_KEYS = ("version", "groups", "presets", "attributes", "spans", "metrics")
_CONFIG_KEY = "telemetry"
SCHEMA_FILE = "span_groups.schema.json"
_T = TypeVar("_T")


class UsageError(Exception):
    """A bad command line; printed as one line, exit code 2."""


# -- output ---------------------------------------------------------------------------------------


def _sorted(findings: Iterable[Finding], files: Sequence[str] = ()) -> list[Finding]:
    """Grouped by file (``files`` first, in that order, then by first appearance), and by
    position inside a file."""
    findings = list(findings)
    order: dict[str, int] = {name: i for i, name in enumerate(files)}
    for f in findings:
        order.setdefault(f.file, len(order))
    return sorted(findings, key=lambda f: (order[f.file], f.line, f.col))


def _counts(findings: Sequence[Finding]) -> dict[str, int]:
    return {
        "violations": sum(f.level == "violation" for f in findings),
        "improvements": sum(f.level == "improvement" for f in findings),
        "information": sum(f.level == "information" for f in findings),
    }


def _summary_line(counts: dict[str, int]) -> str:
    return (
        f"{counts['violations']} violation(s), {counts['improvements']} improvement(s), "
        f"{counts['information']} information"
    )


def _emit(
    findings: Sequence[Finding],
    args: argparse.Namespace,
    *,
    title: str,
    summary: dict[str, Any] | None = None,
    text_extra: str = "",
    out: TextIO | None = None,
) -> int:
    """Print findings (text or JSON); return 1 if any is a violation, else 0."""
    out = out or sys.stdout
    findings = _sorted(findings, (summary or {}).get("files", ()))
    counts = _counts(findings)
    shown = [f for f in findings if _LEVELS.index(f.level) >= _LEVELS.index(args.level)]
    if args.format == "json":
        body = {
            "findings": [f.to_dict() for f in shown],
            "summary": {**counts, "ok": counts["violations"] == 0, **(summary or {})},
        }
        out.write(json.dumps(body, indent=2, default=str) + "\n")
    else:
        for f in shown:
            out.write(f"{f}\n")
        if text_extra:
            out.write(text_extra.rstrip("\n") + "\n")
        hidden = len(findings) - len(shown)
        note = f" ({hidden} below --level {args.level} not shown)" if hidden else ""
        out.write(f"{title}: {_summary_line(counts)}{note}\n")
    return 1 if counts["violations"] else 0


def _display(path: str | os.PathLike[str]) -> str:
    """A path as the user would type it: relative to the working folder when inside it."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


# -- the registry ---------------------------------------------------------------------------------


@dataclass
class _Registry:
    """A registry file as loaded: the spec (None when it has violations), its YAML, findings."""

    path: str
    spec: Spec | None = None
    located: Located | None = None
    findings: list[Finding] = field(default_factory=list)


def _guarded(name: str, action: Callable[[], _T]) -> _T:
    """Run a parse step; turn what the loader lets through into a :class:`SpecError`.

    Raises:
        SpecError: for every problem with the file, as findings.
    """
    import yaml

    try:
        return action()
    except SpecError:
        raise
    except UnicodeDecodeError as exc:
        data = bytes(exc.object)
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        message = f"cannot read file: not UTF-8 text (byte 0x{data[exc.start]:02x})"
        raise SpecError(
            [Finding("file.unreadable", message, file=name, line=line, col=col)]
        ) from None
    except RecursionError:
        message = "the YAML nests too deeply to be read"
        raise SpecError([Finding("yaml.too_deep", message, file=name, line=1, col=1)]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        text = " ".join(filter(None, (exc.context, exc.problem))) or str(exc)
        raise SpecError(
            [Finding("yaml.syntax", f"invalid YAML: {text}", file=name, line=line, col=col)]
        ) from None
    except yaml.YAMLError as exc:
        raise SpecError([Finding("yaml.syntax", f"invalid YAML: {exc}", file=name)]) from None


def _load_registry(path: str | os.PathLike[str]) -> _Registry:
    from spanspec.loader import load_registry

    shown = _display(path)
    result = _Registry(shown)
    source = shown if Path(shown).exists() else path
    try:
        registry, located = _guarded(shown, lambda: load_registry(source))
        result.located = located
        result.spec = compile_registry(registry, located)
        # Improvements of a valid registry, where the compiled Spec keeps them.
        result.findings = list(getattr(result.spec, "findings", ()))
    except SpecError as exc:
        result.findings = list(exc.findings)
    return result


def _require_spec(args: argparse.Namespace) -> tuple[Spec | None, list[Finding]]:
    loaded = _load_registry(args.registry or default_registry_path())
    return loaded.spec, loaded.findings


# -- spanspec check -------------------------------------------------------------------------------


def _classify(path: str) -> str:
    """What a YAML file is, from its top-level keys, without building it.

    Returns ``config`` (a ``telemetry`` key), ``registry`` (a registry section), ``other`` (a
    mapping with neither) or ``broken`` (unreadable, invalid, empty, or not one mapping), read
    with the event parser so a large registry is not built twice.
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    stack: list[list[Any]] = []  # [kind, next scalar is a key] per open container
    keys: set[str] = set()
    documents = 0
    try:
        text = Path(path).read_text(encoding="utf-8")
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    return "broken"
            elif isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
                if not stack and isinstance(event, yaml.SequenceStartEvent):
                    return "broken"
                if stack and stack[-1][0] == "map":
                    stack[-1][1] = not stack[-1][1]
                stack.append(["map" if isinstance(event, yaml.MappingStartEvent) else "seq", True])
            elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                stack.pop()
            elif isinstance(event, yaml.ScalarEvent | yaml.AliasEvent):
                if not stack:
                    return "broken"
                if len(stack) == 1 and stack[0][1] and isinstance(event, yaml.ScalarEvent):
                    keys.add(event.value)
                if stack[-1][0] == "map":
                    stack[-1][1] = not stack[-1][1]
    except (OSError, UnicodeDecodeError, RecursionError, yaml.YAMLError):
        return "broken"
    if not keys:  # empty, or an empty mapping
        return "broken"
    if _CONFIG_KEY in keys:
        return "config"
    if keys & set(_REGISTRY_KEYS):
        return "registry"
    return "other"


def _either_kind(finding: Finding) -> Finding:
    """A file too broken to tell its kind may have been meant as a run config: say so too."""
    if finding.id not in ("schema.empty", "schema.not_a_mapping"):
        return finding
    hint = f" (or, for a run config, a mapping with a '{_CONFIG_KEY}:' block)"
    return replace(finding, message=finding.message + hint)


def _other_file(located: Located) -> list[Finding]:
    keys = [str(k) for k in located.data]
    for key in keys:
        close = difflib.get_close_matches(key, [_CONFIG_KEY, *_REGISTRY_KEYS], n=1, cutoff=0.75)
        if close:
            line, col = located.key_position((key,))
            return [
                Finding(
                    "file.unrecognised",
                    f"top-level key '{key}' is neither a registry section nor '{_CONFIG_KEY}' "
                    f"(did you mean '{close[0]}'?)",
                    file=located.path,
                    line=line,
                    col=col,
                )
            ]
    return [
        Finding(
            "config.no_telemetry",
            f"no top-level '{_CONFIG_KEY}' block and not a registry: nothing to check",
            level="information",
            file=located.path,
            line=1,
            col=1,
        )
    ]


def _check_config(located: Located, spec: Spec | None) -> list[Finding]:
    """Findings for the ``telemetry:`` block of a run config."""
    from spanspec.settings import FIELDS

    fields = {f.name: f for f in FIELDS}
    block = located.data.get(_CONFIG_KEY)
    where = (_CONFIG_KEY,)
    findings: list[Finding] = []

    def add(id_: str, message: str, pos: tuple[int, int], level: str = "violation") -> None:
        findings.append(Finding(id_, message, level, located.path, pos[0], pos[1]))  # type: ignore[arg-type]

    if block is None:
        return findings
    if not isinstance(block, dict):
        add(
            "config.not_a_mapping",
            f"{_CONFIG_KEY}: expected a mapping of settings, got a {type(block).__name__}",
            located.position(where),
        )
        return findings
    for key, value in block.items():
        name = str(key)
        loc = (*where, name)
        spec_field = fields.get(name)
        if spec_field is None:
            hint = did_you_mean(name, fields)
            valid = "" if hint else f"; expected one of: {', '.join(fields)}"
            add(
                "config.unknown_key",
                f"{_CONFIG_KEY}.{name}: unknown setting{hint}{valid}",
                located.key_position(loc),
            )
            continue
        if value is None:
            continue
        if isinstance(value, str) and "${" in value:
            add(
                "config.interpolated",
                f"{_CONFIG_KEY}.{name}={value!r}: an interpolation, resolved only when the config "
                "is loaded; not checked",
                located.position(loc),
                level="information",
            )
            continue
        try:
            spec_field.parse(value)
        except ValueError as exc:
            add(
                "config.invalid_value",
                f"{_CONFIG_KEY}.{name}={value!r}: {exc}",
                located.position(loc),
            )
            continue
        if name == "span_groups":
            findings.extend(_check_span_groups(located, loc, value, spec))
    return findings


def _check_span_groups(
    located: Located, loc: tuple[str, ...], value: Any, spec: Spec | None
) -> list[Finding]:
    if spec is None:
        line, col = located.position(loc)
        return [
            Finding(
                "config.not_checked",
                f"{'.'.join(loc)} not checked: the registry has violations",
                level="information",
                file=located.path,
                line=line,
                col=col,
            )
        ]
    items = (
        [((*loc, i), str(v)) for i, v in enumerate(value)]
        if isinstance(value, list)
        else [(loc, str(value))]
    )
    findings = []
    for item_loc, text in items:
        try:
            spec.resolve(text)
        except SpecError as exc:
            line, col = located.position(item_loc)
            findings.extend(
                Finding(f.id, f"{'.'.join(loc)}: {f.message}", f.level, located.path, line, col)
                for f in exc.findings
            )
    return findings


def _cmd_check(args: argparse.Namespace) -> int:
    from spanspec.codescan import check_calls, scan_paths
    from spanspec.loader import parse_yaml

    findings: list[Finding] = []
    registries: list[str] = []
    configs: list[Located] = []
    files = _yaml_files(args.files, findings)
    for file in files:
        kind = _classify(file)
        if kind == "registry":
            registries.append(file)
            continue
        if kind == "broken":  # the loader says what is wrong, as it would for a registry
            findings.extend(_either_kind(f) for f in _load_registry(file).findings)
            continue
        name = _display(file)
        try:
            located = _guarded(name, lambda: parse_yaml(name))  # noqa: B023 - called at once
        except SpecError as exc:
            findings.extend(exc.findings)
            continue
        if kind == "config":
            configs.append(located)
        else:
            findings.extend(_other_file(located))

    main_path = args.registry or (registries[0] if registries else default_registry_path())
    main = _load_registry(main_path)
    findings.extend(main.findings)
    checked = [main.path]
    for path in registries:
        if _same_file(path, main_path):
            continue
        other = _load_registry(path)
        findings.extend(other.findings)
        checked.append(other.path)
    for located in configs:
        findings.extend(_check_config(located, main.spec))
        checked.append(located.path)

    if args.code:
        scan = scan_paths(args.code)
        checked.extend(scan.files)
        if main.spec is None:
            findings.extend(scan.findings)
            findings.append(
                Finding(
                    "code.not_checked",
                    "span names in the code were not checked: the registry has violations",
                    level="information",
                    file=main.path,
                    line=1,
                    col=1,
                )
            )
        else:
            findings.extend(
                check_calls(
                    main.spec, scan, located=main.located, require_used=args.require_used or ()
                )
            )
    elif args.require_used:
        raise UsageError("--require-used needs --code DIR")

    given = [_display(f) if Path(f).exists() else f for f in files]
    files = list(dict.fromkeys([*given, *checked]))
    summary: dict[str, Any] = {"registry": main.path, "files": files}
    if main.spec is not None:
        summary["spans"] = len(main.spec.spans)
    return _emit(findings, args, title="spanspec check", summary=summary)


def _yaml_files(paths: Sequence[str], findings: list[Finding]) -> list[str]:
    """Files as given; a folder stands for the ``.yaml``/``.yml`` files under it."""
    out: list[str] = []
    for given in paths:
        folder = Path(given)
        if not folder.is_dir():
            out.append(given)
            continue
        found = sorted(
            str(p)
            for pattern in ("*.yaml", "*.yml")
            for p in folder.rglob(pattern)
            if p.is_file()
            and not any(part.startswith(".") for part in p.relative_to(folder).parts[:-1])
        )
        if not found:
            findings.append(
                Finding(
                    "file.no_yaml",
                    "the folder holds no .yaml or .yml files",
                    level="information",
                    file=_display(given),
                )
            )
        out.extend(found)
    return out


def _same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


# -- spanspec groups ------------------------------------------------------------------------------


def _cmd_groups(args: argparse.Namespace) -> int:
    spec, findings = _require_spec(args)
    if spec is None:
        return _emit(findings, args, title="spanspec groups")
    try:
        why = spec.explain(args.expression)
    except SpecError as exc:
        return _emit(list(exc.findings), args, title="spanspec groups")
    spans_of: dict[str, list[str]] = {g: [] for g in spec.groups}
    for name, entry in spec.spans.items():
        spans_of[entry.group].append(name)
    enabled = [g for g in spec.groups if g in why]
    disabled = [g for g in spec.groups if g not in why]
    if args.format == "json":
        body = {
            "expression": args.expression,
            "registry": _display(spec.source),
            "groups": {
                g: {"via": why[g], "bucket": spec.groups[g].bucket, "spans": spans_of[g]}
                for g in enabled
            },
            "disabled": disabled,
            "spans": {n: spec.spans[n].group for g in enabled for n in spans_of[g]},
        }
        sys.stdout.write(json.dumps(body, indent=2) + "\n")
        return 0
    rows = [("group", "bucket", "turned on by", "spans")]
    rows += [(g, spec.groups[g].bucket or "-", why[g], str(len(spans_of[g]))) for g in enabled]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    total = sum(len(spans_of[g]) for g in enabled)
    lines = [
        f"{args.expression!r}: {len(enabled)} of {len(spec.groups)} groups, "
        f"{total} of {len(spec.spans)} spans enabled",
        "",
    ]
    lines += [
        f"  {r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]:>5}" for r in rows
    ]
    lines += ["", f"disabled groups: {', '.join(disabled) or '(none)'}", ""]
    if total:
        lines.append("enabled spans:")
        name_width = max(len(n) for g in enabled for n in spans_of[g])
        for g in enabled:
            for n in spans_of[g]:
                lines.append(f"  {n:<{name_width}}  {g} ({why[g]})")
    sys.stdout.write("\n".join(lines).rstrip() + "\n")
    return 0


# -- spanspec docs / schema -----------------------------------------------------------------------


def _source_name(path: str) -> str:
    default = default_registry_path()
    if _same_file(path, default):
        return f"{default.parent.name}/{default.name}"
    return _display(path)


def _write_or_check(target: Path, text: str, check: bool, command: str) -> int:
    shown = _display(target)
    if check:
        try:
            current = target.read_text(encoding="utf-8")
        except OSError:
            current = None
        if current == text:
            print(f"{shown} is up to date")
            return 0
        state = "is missing" if current is None else "is out of date"
        print(Finding("docs.stale", f"{shown} {state}; run `{command}`", file=shown, line=1, col=1))
        return 1
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {shown}: {exc.strerror}") from None
    print(f"wrote {shown}")
    return 0


def _cmd_docs(args: argparse.Namespace) -> int:
    from spanspec.docs import REFERENCE_FILE, render_reference

    spec, findings = _require_spec(args)
    if spec is None:
        return _emit(findings, args, title="spanspec docs")
    text = render_reference(spec, _source_name(spec.source))
    out = Path(args.out)
    return _write_or_check(
        out / REFERENCE_FILE, text, args.check, f"spanspec docs --out {_display(out)}"
    )


def _cmd_schema(args: argparse.Namespace) -> int:
    from spanspec.schema import json_schema

    text = json.dumps(json_schema(), indent=2) + "\n"
    if args.out is None:
        if args.check:
            raise UsageError("--check needs --out FILE")
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    if out.is_dir():
        out = out / SCHEMA_FILE
    return _write_or_check(out, text, args.check, f"spanspec schema --out {_display(out)}")


# -- spanspec live-check / view -------------------------------------------------------------------


def _trace_files(paths: Sequence[str]) -> list[str]:
    """A folder stands for its ``traces.jsonl``."""
    return [str(Path(p) / "traces.jsonl") if Path(p).is_dir() else p for p in paths]


def _coverage_requirements(spec: Spec, values: Sequence[str]) -> dict[str, float]:
    required: dict[str, float] = {}
    for value in values:
        group, _, fraction = value.partition("=")
        group = group.strip()
        if not any(fnmatch.fnmatchcase(g, group) for g in spec.groups):
            raise UsageError(
                f"--require-coverage: unknown group '{group}'{did_you_mean(group, spec.groups)}; "
                f"groups: {', '.join(spec.groups)}"
            )
        try:
            number = float(fraction) if fraction else 1.0
        except ValueError:
            number = -1.0
        if not 0.0 <= number <= 1.0:
            raise UsageError(
                f"--require-coverage {value!r}: the fraction must be a number between 0 and 1"
            )
        required[group] = number
    return required


def _cmd_live_check(args: argparse.Namespace) -> int:
    from spanspec.livecheck import live_check
    from spanspec.otlp_json import read_traces

    spec, findings = _require_spec(args)
    if spec is None:
        return _emit(findings, args, title="spanspec live-check")
    required = _coverage_requirements(spec, args.require_coverage or ())
    if args.groups is not None:
        try:
            spec.resolve(args.groups)
        except SpecError as exc:
            raise UsageError(f"--groups {args.groups!r}: {exc.findings[0].message}") from None
    files = [_display(p) if Path(p).exists() else p for p in _trace_files(args.files)]
    read = read_traces(files)
    report = live_check(
        spec, read.spans, groups=args.groups, require_coverage=required, all_scopes=args.all_scopes
    )
    findings = read.findings + report.findings
    summary = {
        "files": read.files,
        "spans": len(read.spans),
        "spans_checked": report.spans_checked,
        "groups_source": report.groups_source or None,
        "enabled_groups": sorted(report.enabled_groups)
        if report.enabled_groups is not None
        else None,
        "coverage": [
            {
                "group": c.group,
                "state": c.state,
                "seen": list(c.seen),
                "declared": list(c.declared),
                "emitted": c.emitted,
            }
            for c in report.coverage
        ],
    }
    extra = ""
    if read.spans:
        extra = (
            f"\ncoverage ({report.spans_checked} spans checked in {len(read.files)} file(s)):\n"
            + report.coverage_table()
            + "\n"
        )
    return _emit(findings, args, title="spanspec live-check", summary=summary, text_extra=extra)


def _cmd_view(args: argparse.Namespace) -> int:
    from spanspec.otlp_json import read_traces
    from spanspec.view import render_waterfall, select_trace, traces

    read = read_traces(_trace_files([args.file]))
    for f in read.findings:
        if f.level != "information" or f.id == "otlp.truncated_line":
            print(f, file=sys.stderr)
    summaries = traces(read.spans)
    if args.list:
        for t in summaries:
            print(
                f"{t.trace_id}  {(t.end - t.start) / 1e6:10.1f} ms  {len(t.spans):5d} spans  "
                f"{', '.join(t.root_names)}"
            )
        return 0 if summaries else 1
    try:
        chosen = select_trace(summaries, trace_id=args.trace, step=args.step)
    except LookupError as exc:
        print(f"spanspec view: {exc}", file=sys.stderr)
        return 1
    bar = "█"
    try:
        bar.encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        bar = "#"
    print(render_waterfall(chosen, width=args.width, bar=bar))
    return 0


# -- the parser -----------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit code 2
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _common(p: argparse.ArgumentParser, formats: bool = True) -> None:
    p.add_argument(
        "--registry",
        metavar="PATH",
        help="the registry file (default: $SPANSPEC_REGISTRY, else schemas/span_groups.yaml)",
    )
    if formats:
        p.add_argument("--format", choices=("text", "json"), default="text", help="output format")
        p.add_argument(
            "--level",
            choices=_LEVELS,
            default="information",
            help="print findings of this level and above (the exit code counts all)",
        )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="spanspec",
        description="Check, explain and document a span registry, and hold emitted traces to it.",
        epilog="exit codes: 0 ok, 1 violations, 2 usage error, 3 internal error",
    )
    from spanspec import __version__

    parser.add_argument("--version", action="version", version=f"spanspec {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )

    check = commands.add_parser(
        "check",
        help="validate the registry, run configs and code",
        description="Validate the registry and any run configs with a 'telemetry:' block; with "
        "--code, check every span()/traced() name in Python sources against the registry.",
    )
    check.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="registry or run-config YAML files (default: the registry)",
    )
    check.add_argument(
        "--code",
        action="append",
        metavar="DIR",
        help="Python files or folders to scan (repeatable)",
    )
    check.add_argument(
        "--require-used",
        action="append",
        metavar="PATTERN",
        help="declared spans matching this glob (e.g. 'rl.grpo.*') must be used in the code",
    )
    _common(check)
    check.set_defaults(run=_cmd_check)

    groups = commands.add_parser(
        "groups",
        help="what a group expression enables",
        description="Print the groups and spans a group expression enables, and which preset or "
        "group turned each on. Start the expression with '--' if it begins with '-'.",
    )
    groups.add_argument("expression", metavar="EXPR", help="e.g. per_step,-generation")
    _common(groups)
    groups.set_defaults(run=_cmd_groups)

    docs = commands.add_parser(
        "docs",
        help="generate the Markdown reference",
        description="Write DIR/reference.md (groups, presets, attributes, spans, metrics).",
    )
    docs.add_argument("--out", required=True, metavar="DIR", help="output folder")
    docs.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the file is not up to date"
    )
    _common(docs)
    docs.set_defaults(run=_cmd_docs)

    schema = commands.add_parser(
        "schema",
        help="print or write the registry's JSON Schema",
        description=f"Print the JSON Schema of the registry file, or write it to FILE (a folder "
        f"gets {SCHEMA_FILE}).",
    )
    schema.add_argument("--out", metavar="FILE", help="output file or folder")
    schema.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the file is not up to date"
    )
    schema.set_defaults(run=_cmd_schema, format="text", level="information")

    live = commands.add_parser(
        "live-check",
        help="hold emitted OTLP-JSON traces against the registry",
        description="Check the spans in OTLP-JSON trace files (the file exporter's traces.jsonl; a "
        "folder stands for its traces.jsonl) against the registry, and report coverage per group.",
    )
    live.add_argument("files", nargs="+", metavar="FILE")
    live.add_argument(
        "--groups",
        metavar="EXPR",
        help="the run's group expression (default: each process's spanspec.groups resource "
        "attribute, when present)",
    )
    live.add_argument(
        "--require-coverage",
        action="append",
        metavar="GROUP[=FRACTION]",
        help="a violation when less than FRACTION (default 1) of the group's declared spans "
        "were seen; GROUP may be a glob (repeatable)",
    )
    live.add_argument(
        "--all-scopes",
        action="store_true",
        help="also check spans of other instrumentation scopes than spanspec",
    )
    _common(live)
    live.set_defaults(run=_cmd_live_check)

    view = commands.add_parser(
        "view",
        help="draw one trace as a text waterfall",
        description="Draw one trace of an OTLP-JSON trace file as a waterfall; by default the "
        "first trace whose root is a step span (rl.*.step).",
    )
    view.add_argument("file", metavar="FILE")
    pick = view.add_mutually_exclusive_group()
    pick.add_argument("--trace", metavar="ID", help="trace id (a unique prefix is enough)")
    pick.add_argument("--step", type=int, metavar="N", help="the step with rl.iteration N")
    pick.add_argument("--list", action="store_true", help="list the traces instead")
    view.add_argument("--width", type=_positive, default=40, help="bar width in characters")
    view.set_defaults(run=_cmd_view)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``spanspec`` command line.

    Returns:
        The exit code: 0 ok, 1 violations, 2 usage error, 3 internal error. Never raises
        (``--help`` and ``--version`` return 0).
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except UsageError as exc:
        print(f"spanspec {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `spanspec groups all | head`
        try:
            sys.stdout = open(os.devnull, "w")  # silence the flush at exit
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("SPANSPEC_DEBUG"):
            traceback.print_exc()
        print(
            f"spanspec {args.command}: internal error: {type(exc).__name__}: {exc} "
            "(a bug in spanspec; SPANSPEC_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
