"""Readers of what a run wrote: OTLP-JSON trace files, held against the registry (live-check),
drawn (view, timeline, report) and summed (breakdown).

Nothing here runs in a training process: these modules read files after (or while) a run writes
them, and import nothing of the OpenTelemetry SDK.
"""
