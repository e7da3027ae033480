"""Whether a site is up or down, as the collector's last probe says."""

from __future__ import annotations

from fedhpc.collector import Collector
from fedhpc.domain.site import Health

__all__ = ["offline", "online"]


def offline(collector: Collector, site: str) -> bool:
    """Known to be unreachable (not merely not probed yet)."""
    state = collector.latest.get(site)
    return state is not None and state.health is Health.OFFLINE


def online(collector: Collector, site: str) -> bool:
    state = collector.latest.get(site)
    return state is not None and state.health is not Health.OFFLINE
