"""The wait estimators' recent errors for the dashboard (pure): the daemon's rows per site,
partition and estimator, each marked with what `auto` makes of it there. `auto` takes the
scheduler's estimate whenever the scheduler answers; without it, learned, unless paper's recent
error on that partition is smaller (placement.estimators.choose, EstimatorErrors.prefer), and
only when both have at least `min_samples` judged jobs: below that the data says nothing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["with_auto"]

SCHEDULER_FIRST = "first, whenever the scheduler answers"


def _enough(row: Mapping[str, Any] | None, min_samples: int) -> bool:
    return row is not None and int(row.get("n") or 0) >= min_samples


def with_auto(rows: Iterable[Mapping[str, Any]], *, min_samples: int) -> list[dict[str, Any]]:
    """Each row with `auto`: why `auto` uses this estimator on its partition, or "" when it
    does not (or too few jobs were judged there to say)."""
    out = [{**r, "auto": ""} for r in rows]
    by: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in out:
        by.setdefault((str(r["site"]), str(r["partition"])), {})[str(r["method"])] = r
    for methods in by.values():
        if "scheduler" in methods:
            methods["scheduler"]["auto"] = SCHEDULER_FIRST
        learned, paper = methods.get("learned"), methods.get("paper")
        if (
            learned is None
            or paper is None
            or not (_enough(learned, min_samples) and _enough(paper, min_samples))
        ):
            continue
        win, lose = (paper, learned) if _err(paper) < _err(learned) else (learned, paper)
        win["auto"] = (
            f"preferred without a scheduler estimate: recent error {_err(win):.0f} s "
            f"vs {lose['method']} {_err(lose):.0f} s"
        )
    return out


def _err(row: Mapping[str, Any]) -> float:
    return float(row["median_abs_error_s"])
