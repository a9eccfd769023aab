"""Telemetry of one RL job: the driver starts it before Ray, every worker from the env it inherits.

- :func:`init_telemetry_driver` (once, on the driver, before Ray starts) validates the
  ``telemetry:`` block, resolves the settings (env over YAML over defaults), fixes the job's
  ``run_id``, writes the settings to ``NEMO_RL_OTEL_*`` (never over a variable already set) and
  the job's resource attributes to ``OTEL_RESOURCE_ATTRIBUTES``, builds the exporters, activates
  spanspec and binds the registry's metrics. Configuration errors are raised here, before any
  work starts.
- :func:`init_telemetry_worker` does the same in a worker from the inherited env; the export
  strategy decides whether this rank exports. A rank that does not creates no spans, but trace
  context still passes through it (:mod:`spanspec.propagate` needs no SDK).
- :func:`shutdown_telemetry` ends open spans, flushes within a bounded time and reports losses.

Both init functions are idempotent; nothing after init raises into training.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import secrets
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import spanspec
from nemo_rl.telemetry.config import RL_FIELDS, TelemetryConfig, read_settings
from nemo_rl.telemetry.genai import provider_attributes
from nemo_rl.telemetry.identity import RunIdentity
from spanspec import export, watchdog
from spanspec import metrics as spanspec_metrics
from spanspec.export import ExportStats, TelemetryCost, TelemetryHandle
from spanspec.files import not_regular_output, write_run_pointers
from spanspec.settings import Settings, SettingsError, ignored_variables
from spanspec.spec import Spec

__all__ = [
    "check_telemetry",
    "get_telemetry",
    "init_telemetry_driver",
    "init_telemetry_worker",
    "job_cost",
    "record_metrics",
    "record_token_usage",
    "resolve_settings",
    "shutdown_telemetry",
]

_log = logging.getLogger("nemo_rl.telemetry")

_handle: TelemetryHandle | None = None
_settings: Settings | None = None
_stop_counting_stalls: Any = None


def _count_stall(stall: watchdog.Stall) -> None:
    """The watchdog's on-stall callback: one ``rl.stalls`` point per span that outlived its bound."""
    spanspec_metrics.record("rl.stalls", 1, {"rl.stall.span": stall.name})


# The SDK and exporters come with the ``otel`` extra; without them every site is a no-op.
SDK_MISSING_HINT = "pip install 'nemo-rl-otel[otel]'"
_sdk_warned = False


def _without_sdk(settings: Settings) -> Settings:
    """Return ``settings`` switched off (warned once per process) when the SDK is not installed."""
    global _sdk_warned
    if not settings.enabled or not settings.exporters:
        return settings
    try:
        present = importlib.util.find_spec("opentelemetry.sdk") is not None
    except (ImportError, ValueError):
        present = False
    if present:
        return settings
    if not _sdk_warned:
        _sdk_warned = True
        _log.warning(
            "telemetry: off, the OpenTelemetry SDK is not installed (install it with: %s); "
            "training runs with every span and metric a no-op",
            SDK_MISSING_HINT,
        )
    return settings.with_values("OpenTelemetry SDK not installed", enabled=False)


# -- the settings of a run -----------------------------------------------------------------------


def resolve_settings(
    telemetry: TelemetryConfig,
    identity: RunIdentity | None = None,
    env: Mapping[str, str] | None = None,
    *,
    spec: Spec | None = None,
) -> Settings:
    """Return the effective settings of a run: env over its ``telemetry:`` block over defaults.

    Fills what neither env nor YAML gave: ``run_id`` (``$SLURM_JOB_ID``, else 12 random hex
    digits), ``project`` (the run folder's name) and ``file_dir`` (``<run folder>/telemetry``,
    made absolute so workers with another working directory write to the same place). The env
    prefixes and the default service name are the registry's conventions (``spec``, default the
    discovered registry). Writes nothing.

    Raises:
        SettingsError: for a malformed environment variable.
    """
    env = os.environ if env is None else env
    identity = identity or RunIdentity(algorithm="")
    settings = read_settings(telemetry.explicit(), env=env, spec=spec)
    if settings.run_id is None:
        slurm = env.get("SLURM_JOB_ID", "").strip()
        settings = settings.with_values(
            "env SLURM_JOB_ID" if slurm else "generated", run_id=slurm or secrets.token_hex(6)
        )
    assert settings.run_id is not None
    folder = identity.run_folder(settings.run_id)
    if settings.sources.get("file_dir", "default") == "default":
        settings = settings.with_values("default", file_dir=str((folder / "telemetry").resolve()))
    elif not Path(settings.file_dir).is_absolute():
        source = settings.sources["file_dir"]
        settings = settings.with_values(source, file_dir=str(Path(settings.file_dir).resolve()))
    if settings.project is None:
        # The run folder names the run for people; a backend groups runs by it (Phoenix project).
        name = folder.resolve().name or settings.run_id
        settings = settings.with_values("default (the run folder's name)", project=name)
    return settings


def check_telemetry(
    telemetry: TelemetryConfig,
    identity: RunIdentity | None = None,
    *,
    spec: Spec | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[Settings, Spec, frozenset[str]]:
    """Check everything a run checks about its telemetry before it starts; write nothing.

    The ``telemetry:`` block with every ``NEMO_RL_OTEL_*`` / ``OTEL_*`` variable the exporters
    read (:func:`spanspec.settings.load_settings`), the group expression against the registry
    (the message names the variable or key it came from) and, for the file exporter, that
    ``file_dir`` can be created. ``python -m nemo_rl.telemetry settings`` and
    :func:`init_telemetry_driver` both call this, so they accept and refuse the same things.

    Returns:
        The settings, the registry and the enabled groups.

    Raises:
        SettingsError: for a bad variable, an unknown group or an unwritable ``file_dir``.
        SpecError: for a registry that cannot be loaded.
    """
    spec = spec or spanspec.load()
    settings = resolve_settings(telemetry, identity, env, spec=spec)
    try:
        groups = spec.resolve(settings.span_groups)
    except spanspec.SpecError as exc:
        where = _where(settings, "span_groups")
        raise SettingsError(
            [f"{where}={settings.span_groups!r}: {f.message}" for f in exc.findings]
        ) from None
    if settings.enabled and "file" in settings.exporters:
        problem = _unwritable(Path(settings.file_dir))
        for signal_name in ("traces", "metrics", "logs"):
            if getattr(settings, f"{signal_name}_enabled") and not problem:
                # A FIFO there would block start-up forever (an open for writing waits for a reader)
                problem = not_regular_output(Path(settings.file_dir) / f"{signal_name}.jsonl")
        if problem:
            raise SettingsError(
                [f"{_where(settings, 'file_dir')}={settings.file_dir!r}: {problem}"]
            )
    return settings, spec, groups


def _where(settings: Settings, name: str) -> str:
    """``NEMO_RL_OTEL_SPAN_GROUPS`` or ``telemetry.span_groups``: where a setting came from."""
    source = settings.sources.get(name, "default")
    kind, _, place = source.partition(" ")
    return place.split(" ")[0] if kind in ("env", "config") and place else f"telemetry.{name}"


def _unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot be created or written, or None when it can."""
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            return "no such folder"
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a folder"
    if probe == folder and not os.access(probe, os.W_OK | os.X_OK):
        return f"cannot write in {probe} (permission denied or read-only file system)"
    if probe != folder:
        # Permission bits do not tell (root, /proc, a read-only mount): try, and take it back.
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".spanspec-probe-", dir=probe))
        except OSError as exc:
            return f"cannot create a folder in {probe} ({exc.strerror})"
    return None


# -- the environment workers inherit --------------------------------------------------------------


def _write_env(settings: Settings, resource: Mapping[str, Any]) -> None:
    for key, value in settings.to_env().items():
        os.environ.setdefault(key, value)
    given = os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "").strip()
    present = {unquote(p.split("=", 1)[0].strip()) for p in given.split(",") if "=" in p}
    added = [
        f"{quote(k, safe='.')}={quote(str(v), safe='')}"
        for k, v in resource.items()
        if k not in present and v is not None
    ]
    if added:
        os.environ["OTEL_RESOURCE_ATTRIBUTES"] = ",".join(filter(None, [given, *added]))


def _ray_started() -> bool:
    ray = sys.modules.get("ray")
    try:
        return bool(ray is not None and ray.is_initialized())
    except Exception:
        return False


def _activate(handle: TelemetryHandle, spec: Spec | None) -> None:
    global _stop_counting_stalls
    if _stop_counting_stalls is None:
        _stop_counting_stalls = watchdog.on_stall(_count_stall)
    if not handle.is_exporting:
        spanspec.deactivate()
        spanspec_metrics.unbind()
        return
    spec = spec or spanspec.load()
    spanspec.activate(
        spec,
        groups=handle.settings.span_groups,
        tracer_provider=handle.tracer_provider,
        env_var=None,
    )
    spanspec_metrics.bind(spec, handle.meter_provider)


def _run_on_roots(handle: TelemetryHandle, spec: Spec, run_id: str | None) -> None:
    """Put the run id on every root span whose declaration has the run attribute (the step
    spans): a backend that keeps no resource attributes (MLflow, Phoenix) still ties each trace
    to its run, and so to the logger's MLflow or W&B run of the same job."""
    key = spec.conventions.run_attribute
    provider = handle.tracer_provider
    if not (key and run_id and hasattr(provider, "add_span_processor")):
        return
    from opentelemetry.sdk.trace import SpanProcessor

    names = frozenset(n for n, entry in spec.spans.items() if key in entry.requirements)

    class RunOnRoots(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            if span.parent is None and span.name in names:
                span.set_attribute(key, run_id)

    provider.add_span_processor(RunOnRoots())


# -- the public lifecycle -------------------------------------------------------------------------


def label_attributes(spec: Spec) -> tuple[str, ...]:
    """The resource attributes every Prometheus series carries as labels: the registry's run
    attribute, then its lane attributes (nemo_rl's: ``rl.run_id``, ``rl.worker.group``,
    ``rl.worker.rank``, so ``rl_run_id``, ``rl_worker_group``, ``rl_worker_rank``). One run's
    series never mix with another's, and each process's are apart."""
    conventions = spec.conventions
    run = (conventions.run_attribute,) if conventions.run_attribute else ()
    return (*run, *conventions.lane_attributes)


def _point_run_at_traces(run_folder: Path, settings: Settings) -> None:
    """Where the traces went, kept in the run folder, and the run folder in the trace folder, when
    ``file_dir`` is not under the run folder: ``spanspec report|view|diff RUN_FOLDER`` then find
    the traces and the logger's metrics together (the run pointers, ``spanspec-run.json``). A
    pointer that cannot be written is one warning; the run goes on."""
    try:
        if not any(d.startswith("file ") for d in export.planned_destinations(settings)["traces"]):
            return
        write_run_pointers(run_folder, settings.file_dir, settings.run_id or "")
    except (OSError, SettingsError) as exc:
        _log.warning(
            "telemetry: cannot write the run pointer in %s or %s (%s); the readers find this "
            "run's traces in %s, not from the run folder",
            run_folder,
            settings.file_dir,
            getattr(exc, "strerror", None) or exc,
            settings.file_dir,
        )


def init_telemetry_driver(
    telemetry: TelemetryConfig,
    identity: RunIdentity,
    *,
    spec: Spec | None = None,
    resource: Mapping[str, Any] | None = None,
    worker_group: str = "driver",
    rank: int = 0,
    world_size: int = 1,
) -> TelemetryHandle:
    """Start the job's telemetry on the driver; call once, before Ray starts.

    ``telemetry`` is the run config's validated ``telemetry:`` block, ``identity`` what the run
    is (its resource attributes, and where its files go by default). ``resource`` adds job-wide
    resource attributes (the logger backends' run ids: ``mlflow.run_id``, ``wandb.run_id``),
    which the workers inherit too. The driver always exports when telemetry is on. A second call
    returns the first handle.

    ``worker_group``, ``rank`` and ``world_size`` name the driver's lane: the ``driver`` (the
    main lane) unless the driver is itself rank 0 of equal ranks (a TRL run under ``accelerate
    launch``: rank 0 of ``trainer``, whose other ranks start with :func:`init_telemetry_worker`
    from the settings it wrote).

    Returns:
        The driver's :class:`~spanspec.export.TelemetryHandle`.

    Raises:
        SettingsError: for a malformed ``NEMO_RL_OTEL_*`` / ``NEMO_LENS_*`` / OTLP variable, an
            unknown word in ``span_groups`` or an unwritable ``file_dir`` (see
            :func:`check_telemetry`).
        SpecError: for a registry problem.
    """
    global _handle, _settings
    if _handle is not None:
        return _handle
    # Every check before anything starts: an unknown group fails here, not in a worker.
    settings, spec, groups = check_telemetry(telemetry, identity, spec=spec)
    if _ray_started():
        _log.warning(
            "telemetry: init_telemetry_driver ran after Ray started; workers started earlier "
            "do not see the telemetry settings"
        )
    ignored = ignored_variables(conventions=spec.conventions, fields=RL_FIELDS)
    if ignored:
        _log.warning(
            "telemetry: %s: not a setting here, ignored (the nemo-lens names we read are in "
            "docs/observability/nemo-lens.md)",
            ", ".join(ignored),
        )
    job_resource = {**identity.resource(settings), **(resource or {})}
    handle = export.setup(
        # The env still carries the settings as given: a worker with the SDK exports.
        _without_sdk(settings),
        rank=rank,
        world_size=world_size,
        resource={
            **job_resource,
            "rl.worker.rank": rank,
            "rl.worker.world_size": world_size,
            "rl.worker.group": worker_group,
            # Lets `spanspec live-check` tell a span emitted while its group was off.
            "spanspec.groups": ",".join(sorted(groups)),
        },
        worker_group=worker_group,
        exporting=True,
        handle_sigterm=True,
        label_attributes=label_attributes(spec),
    )
    _run_on_roots(handle, spec, settings.run_id)
    # Only once every setting has proved good, so a failed init leaves the env as it found it;
    # written also when off, so that workers are off too.
    _write_env(settings, job_resource)
    _activate(handle, spec)
    _handle, _settings = handle, settings
    if handle.is_exporting:
        _point_run_at_traces(identity.run_folder(settings.run_id), settings)
    _log.info(
        "telemetry: %s, %s\n%s",
        "exporting" if handle.is_exporting else f"off ({handle.reason})",
        f"run_id {settings.run_id}",
        settings.format_table(),
    )
    return handle


def init_telemetry_worker(
    rank: int,
    world_size: int,
    worker_group: str,
    *,
    local_rank: int | None = None,
    node: str | None = None,
    spec: Spec | None = None,
) -> TelemetryHandle:
    """Start a worker's telemetry from the env the driver wrote; the export strategy decides
    whether this rank exports (``node``: the Ray node id, so ``first_rank_per_node`` picks one
    process per Ray node even where several share a host). Never raises: a bad setting leaves
    telemetry off here, logged.

    Returns:
        The worker's handle (``is_exporting`` False on a rank that does not export).
    """
    global _handle, _settings
    if _handle is not None:
        return _handle
    try:
        # Without the driver's settings (no run id in the env) a worker stays off unless told.
        spec = spec or spanspec.load()
        driver_ran = bool(os.environ.get(f"{spec.conventions.env_prefix}RUN_ID"))
        settings = read_settings(env=os.environ, spec=spec, defaults={"enabled": driver_ran})
        groups = spec.resolve(settings.span_groups)
        picked = export.should_export(
            settings, rank, world_size, local_rank=local_rank, worker_group=worker_group
        )
        if picked:  # only a rank that would export needs the SDK, and says so
            settings = _without_sdk(settings)
        handle = export.setup(
            settings,
            rank=rank,
            world_size=world_size,
            resource={
                "rl.worker.rank": rank,
                "rl.worker.world_size": world_size,
                "rl.worker.group": worker_group,
                **({"rl.worker.local_rank": local_rank} if local_rank is not None else {}),
                **({"rl.worker.node": node} if node else {}),
                "spanspec.groups": ",".join(sorted(groups)),
                **({"rl.run_id": settings.run_id} if settings.run_id else {}),
            },
            local_rank=local_rank,
            worker_group=worker_group,
            node=node,
            handle_sigterm=True,
            label_attributes=label_attributes(spec),
            console_owner=False,  # the driver's stdout carries the console lines
        )
        _activate(handle, spec)
    except Exception as exc:  # a worker trains on whatever its telemetry settings say
        _log.error("telemetry: off in %s rank %d: %s", worker_group, rank, exc)
        settings = Settings(enabled=False)
        handle = export.setup(settings, rank, world_size, exporting=False)
        _activate(handle, None)
    _handle, _settings = handle, settings
    _log.info("telemetry: %s rank %d/%d %r", worker_group, rank, world_size, handle)
    return handle


def get_telemetry() -> TelemetryHandle | None:
    """Return this process's handle, or None before init (and after shutdown)."""
    return _handle


def shutdown_telemetry(timeout_s: float | None = None) -> ExportStats | None:
    """Stop emitting, end open spans (marked truncated), flush within ``timeout_s`` and report.

    ``timeout_s`` defaults to the ``shutdown_timeout_s`` setting (5 s unless configured).

    Logs what was lost (dropped spans, failed exports, skipped metrics). Never raises; a second
    call does nothing.

    Returns:
        The final :class:`~spanspec.export.ExportStats`, or None when telemetry was never started.
    """
    global _handle, _settings, _stop_counting_stalls
    handle, _handle, _settings = _handle, None, None
    if handle is None:
        return None
    if _stop_counting_stalls is not None:
        _stop_counting_stalls()
        _stop_counting_stalls = None
    skipped = spanspec_metrics.skipped_counts()
    spanspec.deactivate()
    spanspec_metrics.unbind()
    stats = handle.shutdown(timeout_s)
    if skipped:
        _log.warning(
            "telemetry: metric values skipped (not finite numbers): %s",
            ", ".join(f"{k} x{v}" for k, v in sorted(skipped.items())),
        )
    return stats


def job_cost(driver: ExportStats | None, workers: Sequence[TelemetryCost] = ()) -> TelemetryCost:
    """The whole job's telemetry cost: the driver's final stats plus each worker's (what the
    loop's teardown returned).

    ``TelemetryCost.line()`` is the line the entry point prints.
    """
    costs = [driver.cost()] if driver is not None else []
    return TelemetryCost.total([*costs, *workers])


def record_metrics(metrics: Mapping[str, Any], prefix: str = "") -> int:
    """Record a logger's scalars as the registry's metrics (``prefix/key`` through ``from:``).

    Called by the logger after its other backends. Unknown keys are ignored; non-numeric values
    of declared metrics are skipped, counted and warned once. Never raises.

    Returns:
        How many metrics were recorded (0 when telemetry is off).
    """
    try:
        return spanspec_metrics.record_metrics(metrics, prefix)
    except Exception:
        _log.warning("telemetry: record_metrics failed", exc_info=True)
        return 0


def record_token_usage(
    input_tokens: int, output_tokens: int, provider: str = "torch", model: str | None = None
) -> None:
    """Record one generation call's ``gen_ai.client.token.usage`` (input and output points).

    The points carry ``gen_ai.token.type``, ``gen_ai.provider.name`` (and ``gen_ai.system``
    while ``OTEL_SEMCONV_STABILITY_OPT_IN`` asks for the old names), ``gen_ai.operation.name``
    and, when given, ``gen_ai.request.model``, as the OpenTelemetry GenAI conventions ask.
    """
    labels = {**provider_attributes(provider), "gen_ai.operation.name": "text_completion"}
    if model:
        labels["gen_ai.request.model"] = model
    try:
        for kind, count in (("input", input_tokens), ("output", output_tokens)):
            spanspec_metrics.record(
                "gen_ai.client.token.usage", count, {"gen_ai.token.type": kind, **labels}
            )
    except Exception:
        _log.warning("telemetry: record_token_usage failed", exc_info=True)
