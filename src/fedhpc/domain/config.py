"""The user's own settings per site: accounts, budgets, endpoints; never in the shipped profiles."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from fedhpc.domain.site import SafeName
from fedhpc.domain.units import MAX_CREDITS

__all__ = ["AccountConfig", "TransportOverride", "UserConfig", "UserSiteConfig"]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class AccountConfig(_Strict):
    """One allocation the user may charge, and on which partitions."""

    name: SafeName
    partitions: tuple[SafeName, ...] = Field(default=(), description="empty = every partition")
    budget: float | None = Field(
        default=None, ge=0, le=MAX_CREDITS, description="credits fedhpc may spend"
    )
    qos: SafeName | None = None


class TransportOverride(_Strict):
    """User-specific reachability: login host, user name, Globus Compute endpoint."""

    host: str | None = None
    user: str | None = None
    endpoint_id: str | None = None
    options: dict[str, str] = Field(default_factory=dict)


class UserSiteConfig(_Strict):
    """What the user adds for one site."""

    enabled: bool = True
    user: str | None = Field(default=None, description="login name at the site")
    accounts: tuple[AccountConfig, ...] = ()
    budget: float | None = Field(
        default=None, ge=0, le=MAX_CREDITS, description="site-wide budget in credits"
    )
    task_budget: float | None = Field(
        default=None, ge=0, le=MAX_CREDITS, description="per-task ceiling"
    )
    transport: TransportOverride = Field(default_factory=TransportOverride)
    workdir: str | None = Field(
        default=None,
        pattern=r"^/[A-Za-z0-9_./~+@=,:-]*$",
        description="where task folders go; default <scratch>/<user>/fedhpc",
    )
    collections: dict[str, str] = Field(
        default_factory=dict, description="storage root name -> Globus collection id"
    )


class UserConfig(_Strict):
    """The user's config file: extra profile folders and per-site settings."""

    profile_dirs: tuple[str, ...] = ()
    sites: dict[SafeName, UserSiteConfig] = Field(default_factory=dict)
    default_site_enabled: bool = Field(
        default=False, description="use sites the config does not mention (no accounts known)"
    )
