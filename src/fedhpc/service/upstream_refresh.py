"""Keeping a signed-in person's upstream tokens fresh: one refresh per person at a time, in this
process (a lock) and across the processes sharing the facade's store (a lease), and a refresh
token the provider refused kept as refused until the person signs in again."""

from __future__ import annotations

import secrets
from typing import Any

import anyio
import httpx2
import structlog
from tenacity import AsyncRetrying, retry_if_result, stop_after_delay, wait_fixed

from fedhpc.service.facade_store import FacadeStore
from fedhpc.service.upstream import Upstream, UpstreamRefused

__all__ = ["UpstreamRefresher"]

log = structlog.get_logger(__name__)

_REFRESH_LEASE_S = 30.0  # one upstream refresh (two HTTP calls of at most 10 s) fits


class UpstreamRefresher:
    """Refreshes the upstream token sets the facade's store holds for each person."""

    def __init__(self, store: FacadeStore, upstream: Upstream, margin_s: float) -> None:
        """`margin_s`: a token set expiring within it is refreshed."""
        self.store = store
        self.upstream = upstream
        self.margin_s = margin_s
        # One upstream refresh per person at a time: two at once would spend one rotating
        # refresh token twice, and the provider may take that for theft.
        self._refreshing: dict[str, anyio.Lock] = {}

    async def refresh(self, person: str) -> bool:
        """Refresh the person's upstream token sets that expire within the margin; False when
        the provider refused a refresh token (the person must sign in again). A provider that
        cannot be reached leaves the tokens as they were."""
        async with self._refreshing.setdefault(person, anyio.Lock()):
            # And one across the processes sharing the store (the endpoint, the daemon): the
            # other's refresh, once done, leaves nothing due here.
            holder = secrets.token_hex(8)
            taking = AsyncRetrying(
                retry=retry_if_result(lambda taken: not taken),
                wait=wait_fixed(0.2),
                stop=stop_after_delay(_REFRESH_LEASE_S),  # past it, a lease taken is lapsed
                retry_error_callback=lambda _: False,
            )
            await taking(self.store.take_refresh, person, holder, _REFRESH_LEASE_S)
            try:
                return await self._refresh(person)
            finally:
                with anyio.CancelScope(shield=True):
                    await self.store.end_refresh(person, holder)

    async def _refresh(self, person: str) -> bool:
        stored = await self.store.upstream(person)
        if stored is None:
            return False
        now = self.store.clock()
        margin = self.margin_s
        sets: list[dict[str, Any]] = []
        changed = False
        held_sets: list[dict[str, Any]] = list(stored.get("sets", []))
        for i, held in enumerate(held_sets):
            token_set = held
            expires = held.get("expires_at")
            due = expires is None or float(expires) - margin <= now
            if due and held.get("refused"):
                return False  # refused before (here or by the daemon): sign in again
            if due and held.get("refresh_token"):
                try:
                    token_set = await self.upstream.refresh(held, now)
                    changed = True
                except UpstreamRefused as exc:
                    log.info("upstream refresh refused", error=exc.error, person=person)
                    # Kept as refused (every process reading the store sees it) until the
                    # person signs in again: never spent again, and their per-person sites
                    # stop being candidates for their tasks (service.people).
                    kept = [*sets, {**held, "refused": True}, *held_sets[i + 1 :]]
                    await self.store.put_upstream(person, {**stored, "sets": kept})
                    return False
                except (httpx2.HTTPError, ValueError) as exc:
                    log.warning("upstream refresh failed", error=type(exc).__name__)
            sets.append(token_set)
        if changed:
            await self.store.put_upstream(person, {**stored, "sets": sets})
        return True
