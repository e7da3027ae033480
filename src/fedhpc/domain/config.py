"""The user's own settings per site: accounts, budgets, endpoints; never in the shipped profiles.
A `Site` joins one shipped profile with these settings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from fedhpc.domain.service import ServiceConfig
from fedhpc.domain.site import SafeName, SiteProfile, TransportSpec
from fedhpc.domain.units import MAX_CREDITS, MAX_SECONDS

__all__ = [
    "AccountConfig",
    "ResumeConfig",
    "ResumeRuntime",
    "Site",
    "TransportOverride",
    "UserConfig",
    "UserSiteConfig",
]


# One shell line each, written by the user in their own config (never by an agent).
PrologueLine = Annotated[str, StringConstraints(max_length=1000, pattern=r"^[^\x00\n\r]*$")]


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
    reserve: float = Field(
        default=0, ge=0, le=MAX_CREDITS, description="credits fedhpc leaves unspent"
    )
    expires: date | None = Field(
        default=None, description="the allocation's last day: nothing is charged to it after"
    )


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
    person_budget: float | None = Field(
        default=None,
        ge=0,
        le=MAX_CREDITS,
        description="service mode: the most each person's work may charge here (the site's "
        "charge unit), what their ended jobs used plus their live jobs' whole wall time",
    )
    transport: TransportOverride = Field(default_factory=TransportOverride)
    identity: Literal["service", "person"] = Field(
        default="service",
        description="whose authorization runs the work here: the service's one identity, or "
        "(service mode with the facade, a Globus Compute site) each person's own, with the "
        "Globus Compute token their sign-in granted",
    )
    submits_in_flight: int | None = Field(
        default=None,
        ge=1,
        le=16,
        description="scheduler submit calls at once at this site (default 2); each call may "
        "carry several jobs",
    )
    hedges_in_flight: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="hedged copies (extra submissions of one task) each person may have live "
        "here at once (default 4; 0: none)",
    )
    prologue: tuple[PrologueLine, ...] | None = Field(
        default=None,
        max_length=64,
        description="shell lines run before every task here, instead of the profile's (module "
        "loads that differ between your centers); a job script's body runs after them",
    )
    min_refresh_s: int | None = Field(
        default=None,
        ge=1,
        le=86400,
        description="probe this site at most this often; only raises the profile's floor",
    )
    status_floor_s: int | None = Field(
        default=None,
        ge=1,
        le=86400,
        description="observe jobs at most this often; only raises the profile's floor",
    )
    max_commands_per_min: int | None = Field(
        default=None, ge=1, le=6000, description="only lowers the profile's command cap"
    )
    max_pending_per_user: int | None = Field(
        default=None, ge=1, le=100_000, description="only lowers the profile's pending cap"
    )
    workdir: str | None = Field(
        default=None,
        pattern=r"^/[A-Za-z0-9_./~+@=,:-]*$",
        description="where task folders go; default <scratch>/<user>/fedhpc",
    )
    collections: dict[str, str] = Field(
        default_factory=dict, description="storage root name -> Globus collection id"
    )


_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class ResumeRuntime(_Strict):
    """How the daemon starts one agent CLI to resume a session: its binary and its whole
    environment. Nothing comes from the client that started the daemon."""

    binary: str | None = Field(
        default=None,
        pattern=r"^/[^\x00-\x1f]*$",
        description="absolute path of the CLI; default: found on `path`",
    )
    path: str | None = Field(
        default=None, description="PATH for the resume; default /usr/local/bin:/usr/bin:/bin"
    )
    env: dict[str, str] = Field(default_factory=dict, description="variables for the resume")
    env_file: str | None = Field(
        default=None, description="KEY=VALUE lines (e.g. credentials), read at each resume"
    )

    @model_validator(mode="after")
    def _names(self) -> Self:
        for name in self.env:
            if not re.match(_ENV_NAME, name):
                raise ValueError(f"resume env: {name!r} is not a variable name")
        return self


class ResumeConfig(_Strict):
    """`[resume]`: one table per agent runtime (`claude-code`, `codex`, `command`)."""

    claude_code: ResumeRuntime | None = Field(default=None, alias="claude-code")
    codex: ResumeRuntime | None = None
    command: ResumeRuntime | None = None

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def get(self, runtime: str) -> ResumeRuntime:
        found = {"claude-code": self.claude_code, "codex": self.codex, "command": self.command}
        return found.get(runtime) or ResumeRuntime()


class HedgeConfig(_Strict):
    """`[hedge]`: the default of a task's `adaptation.hedge_copies` and `hedge_min_gain_s`."""

    copies: int = Field(default=1, ge=1, le=3, description="sites a task may go to at once")
    min_gain_s: float = Field(
        default=60.0, ge=0, le=MAX_SECONDS, description="the expected finish a copy must gain"
    )


class UserConfig(_Strict):
    """The user's config file: extra profile folders and per-site settings."""

    profile_dirs: tuple[str, ...] = ()
    sites: dict[SafeName, UserSiteConfig] = Field(default_factory=dict)
    resume: ResumeConfig = Field(default_factory=ResumeConfig)
    default_site_enabled: bool = Field(
        default=False, description="use sites the config does not mention (no accounts known)"
    )
    goal: Literal["fastest", "cheapest", "balanced"] = Field(
        default="fastest",
        description="placement goal of a task or group that names none (read at daemon start)",
    )
    hedge: HedgeConfig = Field(
        default_factory=HedgeConfig,
        description="hedged submission for tasks whose adaptation names none (read at start)",
    )
    service: ServiceConfig | None = Field(
        default=None,
        description="`fedhpc serve --http` as an OAuth resource server (docs/service.md)",
    )


@dataclass(frozen=True, slots=True)
class Site:
    """A profile joined with the user's settings: what the adapters and placement use."""

    profile: SiteProfile
    user: UserSiteConfig
    # The profile's name, kept as a field: placement reads it for every candidate.
    name: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.profile.name)
        object.__setattr__(self, "profile", _as_configured(self.profile, self.user))

    @property
    def transport(self) -> TransportSpec:
        """The profile's transport with the user's host, login and endpoint applied."""
        base = self.profile.transport
        o = self.user.transport
        return base.model_copy(
            update={
                "host": o.host or base.host,
                "user": o.user or base.user,
                "endpoint_id": o.endpoint_id or base.endpoint_id,
                "options": {**base.options, **o.options},
            }
        )


def _as_configured(profile: SiteProfile, user: UserSiteConfig) -> SiteProfile:
    """The profile as this user runs it: their prologue instead of the profile's, and their
    probe and observe floors where higher and command and pending caps where lower (never
    laxer than the center's)."""
    update: dict[str, object] = {}
    if user.prologue is not None and user.prologue != profile.conventions.prologue:
        update["conventions"] = profile.conventions.model_copy(update={"prologue": user.prologue})
    if user.min_refresh_s is not None and user.min_refresh_s > profile.min_refresh_s:
        update["min_refresh_s"] = user.min_refresh_s
    if user.status_floor_s is not None and user.status_floor_s > profile.status_floor:
        update["status_floor_s"] = user.status_floor_s
    cap = user.max_commands_per_min
    if cap is not None and cap < profile.command_cap:
        update["max_commands_per_min"] = cap
    most = user.max_pending_per_user
    if most is not None and most < (profile.max_pending_per_user or most + 1):
        update["max_pending_per_user"] = most
    return profile.model_copy(update=update) if update else profile
