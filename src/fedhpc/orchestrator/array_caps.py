"""Elements per job array at each site, learned from its scheduler's refusals (pure): halved
on each array refused for its size, doubled back after each `HOLD` without a refusal (a limit
counting the user's queued jobs, such as MaxSubmit, relaxes as they end; MaxArraySize does
not, and then costs one refused array per hold)."""

from __future__ import annotations

from datetime import datetime, timedelta

from fedhpc.adapters.arrays import ARRAY_MAX

__all__ = ["HOLD", "ArrayCaps"]

HOLD = timedelta(hours=1)


class ArrayCaps:
    """Per site: the most elements an array may have there now (`most`), and a refusal of
    one of `size` elements (`refused`). A site never refused is at `ARRAY_MAX`."""

    def __init__(self) -> None:
        self.caps: dict[str, int] = {}  # sites under ARRAY_MAX only
        self._since: dict[str, datetime] = {}  # when each cap was last set or doubled

    def most(self, site: str, now: datetime) -> int:
        cap = self.caps.get(site)
        if cap is None:
            return ARRAY_MAX
        while cap < ARRAY_MAX and now - self._since[site] >= HOLD:
            cap = min(ARRAY_MAX, max(cap, 1) * 2)
            self._since[site] += HOLD
        if cap >= ARRAY_MAX:
            del self.caps[site], self._since[site]
            return ARRAY_MAX
        self.caps[site] = cap
        return cap

    def refused(self, site: str, size: int, now: datetime) -> int:
        """An array of `size` refused whole for its size: the site's cap is now at most half
        of it (under 2: no arrays there until it doubles back)."""
        cap = self.caps[site] = min(self.most(site, now), size // 2)
        self._since[site] = now
        return cap
