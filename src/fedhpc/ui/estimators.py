"""The wait estimators' recent errors for the dashboard (pure): the daemon's rows per site,
partition and estimator, each marked with what `auto` makes of it there. Whether `auto` uses an
estimator is the daemon's answer (`auto_prefers`, decided on the unrounded errors by
placement.errors.EstimatorErrors.auto_prefers); this module only words it. `auto` takes the
scheduler's estimate whenever the scheduler answers; without it, learned, unless paper's recent
error on that partition is smaller, and only when both were judged on the daemon's
`min_samples` jobs: below that the data says nothing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["SCHEDULER_FIRST", "with_auto"]

SCHEDULER_FIRST = "first, whenever the scheduler answers"


def with_auto(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each row with `auto`: why `auto` uses this estimator on its partition, or "" when it
    does not (or too few jobs were judged there to say)."""
    out = [{**r, "auto": ""} for r in rows]
    by: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in out:
        by.setdefault((str(r["site"]), str(r["partition"])), {})[str(r["method"])] = r
    for methods in by.values():
        for method, r in methods.items():
            if not r.get("auto_prefers"):
                continue
            if method == "scheduler":
                r["auto"] = SCHEDULER_FIRST
                continue
            other = methods.get("paper" if method == "learned" else "learned")
            vs = f" vs {other['method']} {_err(other):.0f} s" if other is not None else ""
            r["auto"] = f"preferred without a scheduler estimate: recent error {_err(r):.0f} s{vs}"
    return out


def _err(row: Mapping[str, Any]) -> float:
    return float(row["median_abs_error_s"])
