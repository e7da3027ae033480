"""Site names in a request, checked before anything is placed (pure): a name that is not a
site, or a shipped site the user's config does not enable or give an account, is a typed
error naming the usable sites and the config.toml fix, never a silent fallback."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Annotated

from pydantic import AfterValidator

from fedhpc.domain.site import SAFE_NAME
from fedhpc.errors import FieldIssue, ValidationFailed

__all__ = [
    "MAX_SITE_NAME",
    "SiteName",
    "SiteNotUsable",
    "check_site_name",
    "check_site_names",
    "shown",
]

MAX_SITE_NAME = 128  # SAFE_NAME's bound: every profile's name fits it


def shown(name: str, limit: int = 60) -> str:
    """`name` quoted for a message, cut at `limit` characters (a 1 MiB name is no message)."""
    return repr(name) if len(name) <= limit else f"{name[:limit]!r}... ({len(name)} characters)"


def check_site_name(name: str) -> str:
    """A site name in a request has a profile name's shape: at most 128 letters, digits, '_',
    '.', '+', '-'. Anything else is no site, and some of it would not fit a URL's query (a
    1 MiB name answered `internal`)."""
    if len(name) > MAX_SITE_NAME:
        raise ValueError(
            f"a site name has at most {MAX_SITE_NAME} characters, not {len(name)}: "
            "`fedhpc sites list` or inspect_federation names the sites"
        )
    if not SAFE_NAME.match(name):
        raise ValueError(
            f"{shown(name)} is not a site name (letters, digits, '_', '.', '+', '-'): "
            "`fedhpc sites list` or inspect_federation names the sites"
        )
    return name


SiteName = Annotated[str, AfterValidator(check_site_name)]


class SiteNotUsable(ValidationFailed):
    """A request names a site fedhpc cannot run on for this user."""

    code = "site_not_usable"


def _why(
    name: str,
    usable: Collection[str],
    enabled: Collection[str],
    profiles: Collection[str],
    config_path: str,
) -> str | None:
    if name in usable:
        return None
    if name in enabled:
        return (
            f"{name} is enabled but no account is known for it: add one to {config_path} as "
            f'[[sites.{name}.accounts]] name = "YOUR_ALLOCATION"'
        )
    if name in profiles:
        return (
            f"{name} has a site profile but is not enabled in {config_path}: add "
            f'[sites.{name}] with user = "LOGIN" and [[sites.{name}.accounts]] '
            f'name = "YOUR_ALLOCATION"'
        )
    return f"no site is called {shown(name)}"


def check_site_names(
    names: Mapping[str, str],
    *,
    usable: Collection[str],
    enabled: Collection[str],
    profiles: Collection[str],
    config_path: str,
) -> None:
    """`names`: field -> site name. Raises SiteNotUsable naming each bad field, the usable
    sites and the fix; returns when every name is usable."""
    issues = [
        FieldIssue(field, why)
        for field, name in names.items()
        if (why := _why(name, usable, enabled, profiles, config_path)) is not None
    ]
    if issues:
        ok = ", ".join(sorted(usable)) or "none"
        raise SiteNotUsable(
            issues, hint=f"Usable sites: {ok}. Name one of them, or fix the config as said."
        )
