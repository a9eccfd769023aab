"""Where the step time went: now computed in :mod:`spanspec.breakdown` (the report uses it too)."""

from spanspec.breakdown import Breakdown, PhaseTime, compute_breakdown, step_breakdown

__all__ = ["Breakdown", "PhaseTime", "compute_breakdown", "step_breakdown"]
