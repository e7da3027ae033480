"""The daemon's check of site names in requests: what the user's config makes usable, and
which names are shipped or user profiles that the config does not enable."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

from fedhpc.collector import Collector
from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.site import Health
from fedhpc.errors import FieldIssue
from fedhpc.ops.sitecheck import check_site_names
from fedhpc.ops.workdir import OutputOutside, WorkdirOutside, outside_message, sites_holding
from fedhpc.profiles.loader import (
    load_profiles,
    load_user_config,
    user_config_path,
    user_profile_dirs,
)

__all__ = ["check_request_sites"]


@lru_cache(maxsize=1)
def _profile_names() -> frozenset[str]:
    try:
        return frozenset(load_profiles(user_profile_dirs(load_user_config())))
    except Exception:  # a broken file is the loader's error to report, not this check's
        return frozenset()


def _usable(collector: Collector) -> set[str]:
    """Enabled sites a request may name: an account is configured, none is needed, or the
    site's accounts are unknown (not probed yet, or offline: a site that is down is a known
    site, and placement says it is offline; "add an account" would be false)."""
    out = set()
    for name, site in collector.sites.items():
        state = collector.latest.get(name)
        if (
            site.user.accounts
            or not site.profile.conventions.account_required
            or state is None  # not probed yet: whether it lists accounts is unknown
            or state.health is Health.OFFLINE  # its last probe failed: unknown, not absent
            or state.accounts
        ):
            out.add(name)
    return out


def _envelope_names(env: ResourceEnvelope | None, prefix: str) -> Iterable[tuple[str, str]]:
    if env is None:
        return
    for field in ("sites_include", "sites_exclude"):
        for i, name in enumerate(getattr(env, field)):
            yield f"{prefix}{field}[{i}]", name
    for i, name in enumerate(env.preferences.sites):
        yield f"{prefix}preferences.sites[{i}]", name


def check_request_sites(
    collector: Collector,
    *,
    fixed_site: str | None = None,
    envelope: ResourceEnvelope | None = None,
    exclude_sites: Iterable[str] = (),
    workdir: str | None = None,
    outputs: Sequence[str] = (),
) -> None:
    """Raises SiteNotUsable for a site name the request cannot use (see ops.sitecheck),
    WorkdirOutside for an absolute workdir and OutputOutside for absolute outputs inside no
    storage root of any enabled site."""
    profiles = {n: s.profile for n, s in collector.sites.items()}
    if workdir and workdir.startswith("/") and not sites_holding(workdir, profiles.values()):
        raise WorkdirOutside([FieldIssue("workdir", outside_message(workdir, profiles))])
    outside = [
        FieldIssue(f"outputs[{i}]", outside_message(path, profiles))
        for i, path in enumerate(outputs)
        if path.startswith("/") and not sites_holding(path, profiles.values())
    ]
    if outside:
        raise OutputOutside(outside)
    names = dict(_envelope_names(envelope, "envelope."))
    names.update({f"exclude_sites[{i}]": n for i, n in enumerate(exclude_sites)})
    if fixed_site:
        names["fixed_site"] = fixed_site
    if not names:
        return
    usable = _usable(collector)
    # Excluding a site that has no account changes nothing: only other names must be usable.
    enabled = set(collector.sites)
    names = {f: n for f, n in names.items() if not ("exclude" in f and n in enabled)}
    check_site_names(
        names,
        usable=usable,
        enabled=enabled,
        profiles=_profile_names(),
        config_path=str(user_config_path()),
    )
