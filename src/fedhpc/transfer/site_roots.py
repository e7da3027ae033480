"""Storage roots given as login-shell variables (`$WORK`, `$SCRATCH`): expanded by the site's
own shell through its adapter when a transfer is submitted or a stage-out finds its source."""

from __future__ import annotations

from collections.abc import Mapping

from fedhpc.adapters.site import SiteAdapter, StorageUnread, WorkdirFailed
from fedhpc.domain.config import Site
from fedhpc.ops.data import DataLocation
from fedhpc.transfer.errors import RootUnexpanded, TransferUnavailable
from fedhpc.transfer.refs import at_site

__all__ = ["RootExpander"]


class RootExpander:
    """Expands `$NAME` roots through the sites' adapters; a site's roots not read by a probe
    yet are read on first need (not again within half a cycle)."""

    def __init__(self, adapters: Mapping[str, SiteAdapter], *, cycle_s: float) -> None:
        self.adapters = adapters
        self.cycle_s = cycle_s

    async def _expander(self, site_name: str) -> SiteAdapter | None:
        adapter = self.adapters.get(site_name)
        if adapter is not None and adapter.roots is None:  # not read by a probe yet: now
            await adapter.read_roots(unless_within_s=self.cycle_s / 2)
        return adapter

    async def location(self, loc: DataLocation) -> DataLocation:
        """`loc` with a `$NAME` root expanded by its site's login shell (a plain root as is).
        Raises RootUnexpanded when the variable is unset or no adapter reaches the site."""
        if not loc.root_path.startswith("$"):
            return loc
        adapter = await self._expander(loc.site)
        hint = (
            f"Check with `fedhpc doctor {loc.site}` that the login shell sets the variable, "
            f"or fix the root's path in the {loc.site} profile."
        )
        if adapter is None:
            raise RootUnexpanded(
                f"storage root {loc.root!r} of {loc.site} is {loc.root_path}, "
                "and no connection to the site expands it",
                hint=hint,
            )
        try:
            return at_site(loc, adapter.root_path)
        except StorageUnread as exc:  # the site did not answer the read: the next cycle asks
            raise TransferUnavailable(exc.message, hint=exc.hint) from None
        except WorkdirFailed as exc:  # `... on SITE: storage root $X: $X is not set ...`
            why = exc.message.partition(": ")[2] or exc.message
            raise RootUnexpanded(f"{loc.site}: {why}", hint=hint) from None

    async def named(self, site: Site) -> dict[str, str]:
        """The site's `$NAME` roots by name, as expanded by its shell (those it could)."""
        named = [r for r in site.profile.storage if r.path.startswith("$")]
        adapter = await self._expander(site.name) if named else None
        out: dict[str, str] = {}
        if adapter is None:
            return out
        for r in named:
            try:
                out[r.name] = adapter.root_path(r.path)
            except StorageUnread as exc:  # unread: the next cycle asks again
                raise TransferUnavailable(exc.message, hint=exc.hint) from None
            except WorkdirFailed:
                continue
        return out
