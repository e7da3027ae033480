"""Profile sources: what another installed package adds to profile loading, through the
`fedhpc.profiles` entry-point group (pyproject.toml). fedhpc's development tooling registers
the local test federation this way (its profiles ship in its own package); the runtime knows
only this protocol."""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol

from fedhpc.domain.config import UserSiteConfig
from fedhpc.domain.site import SiteProfile

__all__ = ["PROFILES_GROUP", "ProfileSource", "profile_sources"]

PROFILES_GROUP = "fedhpc.profiles"


class ProfileSource(Protocol):
    """One package's part in loading profiles; each entry point of PROFILES_GROUP names an
    object with these three methods. `rewrite` and `enables` read the environment at each call
    (never cached), so a source follows the settings of the moment."""

    def profile_dirs(self) -> tuple[Path, ...]:
        """Folders of profiles this package ships, read after fedhpc's own and before the
        user's (a later file with the same name wins)."""
        ...

    def rewrite(self, data: dict[str, Any]) -> dict[str, Any]:
        """A profile's TOML data before it is validated (the same data when not its own)."""
        ...

    def enables(self, profile: SiteProfile) -> UserSiteConfig | None:
        """The settings of a site this source enables although no config names it; None when
        it does not enable it."""
        ...


@cache
def profile_sources() -> tuple[ProfileSource, ...]:
    """Every registered source, in the order of their entry points' names (loaded once)."""
    found = sorted(entry_points(group=PROFILES_GROUP), key=lambda ep: ep.name)
    return tuple(ep.load() for ep in found)
