"""Sites whose controller just missed an observation's ping (`orchestrator.suspect`): new work
avoids them while another site fits, as a task's siblings' systems are avoided (soft: placed
there when nothing else fits). A site is suspect until it answers an observation again, or for
`hold_s` after its last missed ping (a site with nothing left to observe is tried again then;
a controller that is truly gone is taken offline by the probe). Pure: no I/O."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.placement import Placement, PlacementInputs, Unschedulable, place_group

__all__ = ["SuspectSites", "place_avoiding"]


class SuspectSites:
    """Site -> (why, until when)."""

    def __init__(self, clock: Callable[[], datetime], *, hold_s: float) -> None:
        self.clock = clock
        self.hold = timedelta(seconds=hold_s)
        self._until: dict[str, tuple[str, datetime]] = {}

    def mark(self, site: str, why: str) -> None:
        """`site`'s controller missed a ping now (`why`: what the ping said)."""
        self._until[site] = (why, self.clock() + self.hold)

    def clear(self, site: str) -> None:
        """`site` answered an observation: trusted again."""
        self._until.pop(site, None)

    def now(self) -> dict[str, str]:
        """The sites suspect now, and why (for the placement rule that names them)."""
        at = self.clock()
        return {
            s: f"{why} (new work goes elsewhere while another site fits)"
            for s, (why, until) in self._until.items()
            if until > at
        }


def place_avoiding(
    envelopes: list[ResourceEnvelope],
    inputs: PlacementInputs,
    caps: Mapping[str, int],
    suspects: Mapping[str, str],
) -> list[Placement | Unschedulable]:
    """A group's alike children in one pass (`place_group`), none on a suspect site; those
    that fit nowhere else then in a second pass that may use them (the first pass's
    placements already claimed in the ledger and counted against `caps`)."""
    out = place_group(envelopes, replace(inputs, suspect=dict(suspects) or None), site_caps=caps)
    left = [i for i, d in enumerate(out) if isinstance(d, Unschedulable)]
    if not suspects or not left:
        return out
    took = Counter(d.site for d in out if isinstance(d, Placement))
    again = place_group(
        [envelopes[i] for i in left],
        inputs,
        site_caps={s: n - took[s] for s, n in caps.items()},
    )
    for i, d in zip(left, again, strict=True):
        out[i] = d
    return out
