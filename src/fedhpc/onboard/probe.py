"""One batched probe per enabled site, concurrently, straight from this process: the diagnostic
behind `fedhpc probe`, which talks to each site itself rather than through the daemon."""

from __future__ import annotations

import anyio

from fedhpc.adapters.site import open_adapter
from fedhpc.domain.site import SiteState
from fedhpc.errors import FedError, UsageError
from fedhpc.profiles import load_federation

__all__ = ["probe_sites"]


async def probe_sites(
    names: list[str], timeout_s: float = 30.0
) -> list[tuple[str, SiteState | FedError]]:
    """Probe the named enabled sites (all when empty), each under its own timeout: each site's
    name with its state, or the typed error its probe raised (a refused ssh option, a login
    that needs a person). One site's error never stops the others' probes; an untyped error
    (a bug) does."""
    sites = load_federation()
    unknown = [n for n in names if n not in sites]
    if unknown:
        raise UsageError(
            f"not enabled: {', '.join(unknown)}",
            hint="Add the site to your config.toml, or set FEDHPC_DEVFED=1 for the devfed sites.",
        )
    chosen = [sites[n] for n in names] if names else list(sites.values())
    results: dict[str, SiteState | FedError] = {}

    async def one(site_name: str) -> None:
        adapter = open_adapter(sites[site_name])
        try:
            results[site_name] = await adapter.probe(timeout_s=timeout_s)
        except FedError as exc:  # this site's answer: the others go on
            results[site_name] = exc
        finally:
            await adapter.transport.aclose()

    async with anyio.create_task_group() as tg:
        for site in chosen:
            tg.start_soon(one, site.name, name=f"probe:{site.name}")
    return [(s.name, results[s.name]) for s in chosen]
