"""The collector service: a live, bounded-history view of every enabled site."""

from fedhpc.collector.credit import with_budgets
from fedhpc.collector.service import Collector, RefreshReport

__all__ = ["Collector", "RefreshReport", "with_budgets"]
