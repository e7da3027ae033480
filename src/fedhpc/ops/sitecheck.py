"""Site names in a request, checked before anything is placed (pure): a name that is not a
site, or a shipped site the user's config does not enable or give an account, is a typed
error naming the usable sites and the config.toml fix, never a silent fallback."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from fedhpc.errors import FieldIssue, ValidationFailed

__all__ = ["SiteNotUsable", "check_site_names"]


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
    return f"no site is called {name!r}"


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
