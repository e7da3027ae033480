"""What job arrays leave behind (issue 40): the files the scheduler itself writes for each
element in the site's `arrays` folder (`site_paths.arrays_dir`), which nothing reads: each
element's own output goes to its task's files. Once an element has ended (its final
accounting merged), its two files are removed, what the scheduler's stderr held (a time
limit's or a cancel's words) first appended to the element's own stderr. Only files fedhpc
named there: never a path of the user's."""

from __future__ import annotations

from collections.abc import Mapping

from fedhpc.adapters.site import SiteAdapter
from fedhpc.logs import isolated
from fedhpc.orchestrator.records import AttemptRecord
from fedhpc.orchestrator.site_paths import arrays_dir

__all__ = ["ArrayLeftovers"]


class ArrayLeftovers:
    """Ended array elements per site (`note`, under the lock), cleared after it (`clear`)."""

    def __init__(self, adapters: Mapping[str, SiteAdapter]) -> None:
        self.adapters = adapters
        self.ended: dict[str, list[tuple[str, str | None]]] = {}  # site -> (element, own err)

    def note(self, a: AttemptRecord) -> None:
        """`a` has ended: its scheduler files go with the site's next `clear`."""
        if a.array_name is not None and a.job_id is not None:
            self.ended.setdefault(a.site, []).append((a.job_id, a.stderr or a.stdout))

    async def clear(self, site: str) -> None:
        """Without the lock: the site's ended elements' scheduler files, in one remote call. A
        failure is logged and leaves them (they hold nothing fedhpc needs)."""
        ended = self.ended.pop(site, [])
        if not ended:
            return
        with isolated("clearing array outputs failed", site=site, elements=len(ended)):
            adapter = self.adapters[site]
            where = arrays_dir(adapter)
            trios = [
                (*files, own)
                for element, own in ended
                if (files := adapter.array_outputs(where, element)) is not None
            ]
            await adapter.clear_array_outputs(trios)
