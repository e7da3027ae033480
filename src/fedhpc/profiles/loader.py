"""Load shipped and user site profiles and the user's config; one clear error per broken file."""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from fedhpc.domain.config import Site, UserConfig, UserSiteConfig
from fedhpc.domain.site import SiteProfile
from fedhpc.errors import ProfileError
from fedhpc.profiles.sources import profile_sources
from fedhpc.settings import CONFIG, fedhpc_home

__all__ = [
    "load_federation",
    "load_profile",
    "load_profiles",
    "load_user_config",
    "shipped_profile_dirs",
    "shipped_profiles_dir",
    "user_config_path",
    "user_profile_dirs",
    "user_profiles_dir",
]

M = TypeVar("M", bound=BaseModel)


def shipped_profiles_dir() -> Path:
    """The folder of profiles that ship inside the package: real centers only."""
    return Path(str(resources.files("fedhpc") / "site_profiles"))


def shipped_profile_dirs() -> list[Path]:
    """Every folder of profiles an installed package ships: fedhpc's, then each profile
    source's (profiles/sources.py), in the order they are read."""
    return [shipped_profiles_dir(), *(d for s in profile_sources() for d in s.profile_dirs())]


def user_config_path() -> Path:
    """`$FEDHPC_CONFIG`, else `config.toml` in the fedhpc home."""
    if env := CONFIG.read():
        return Path(env)
    return fedhpc_home() / "config.toml"


def _first_error(path: Path, exc: ValidationError) -> ProfileError:
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    msg = err["msg"].removeprefix("Value error, ")
    more = len(exc.errors()) - 1
    if more:
        msg += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ProfileError(str(path), key, msg)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        return _raise(ProfileError(str(path), "(syntax)", str(exc)))
    except OSError as exc:
        return _raise(ProfileError(str(path), "(file)", exc.strerror or str(exc)))


def _raise(err: ProfileError) -> dict[str, Any]:
    raise err


def _validate(model: type[M], data: dict[str, Any], path: Path) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _first_error(path, exc) from None


def load_profile(path: Path) -> SiteProfile:
    """One profile; the file's stem must equal its `name`."""
    data = _read_toml(path)
    for source in profile_sources():
        data = source.rewrite(data)
    profile = _validate(SiteProfile, data, path)
    if profile.name != path.stem:
        raise ProfileError(str(path), "name", f"is {profile.name!r} but the file is {path.name}")
    return profile


def load_profiles(dirs: Iterable[Path] | None = None) -> dict[str, SiteProfile]:
    """Shipped profiles (fedhpc's, then the profile sources'), then each folder in order; a
    later file with the same name wins."""
    folders = [*shipped_profile_dirs(), *(dirs or [])]
    out: dict[str, SiteProfile] = {}
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.toml")):
            profile = load_profile(path)
            out[profile.name] = profile
    return out


def user_profiles_dir() -> Path:
    """The user's own profile folder, where `fedhpc sites discover` writes."""
    return fedhpc_home() / "profiles"


def user_profile_dirs(config: UserConfig) -> list[Path]:
    """Folders of the user's profiles, read after the shipped ones: `<fedhpc home>/profiles`
    (where `fedhpc sites discover` writes), then the config's `profile_dirs` in order."""
    return [user_profiles_dir(), *(Path(os.path.expanduser(d)) for d in config.profile_dirs)]


def load_user_config(path: Path | None = None) -> UserConfig:
    """The user's config, or an empty one when the file does not exist."""
    path = path or user_config_path()
    if not path.exists():
        return UserConfig()
    return _validate(UserConfig, _read_toml(path), path)


def _unknown_site_hint(name: str, profiles: Mapping[str, SiteProfile]) -> str:
    """A typo'd [sites.NAME]: the closest profile names, and how to add a new center."""
    close = difflib.get_close_matches(name, sorted(profiles), n=3, cutoff=0.6)
    fix = f"Did you mean {' or '.join(close)}? Rename the table in the config. " if close else ""
    return (
        f"{fix}`fedhpc sites list` names every profile; a center fedhpc does not ship: "
        f"`fedhpc connect {name} --ssh HOST`."
    )


def load_federation(
    config: UserConfig | None = None, *, config_path: Path | None = None
) -> dict[str, Site]:
    """Every site that is enabled: named in the user's config, or enabled by a profile source
    (profiles/sources.py: the dev tooling's local-test sites), or every profile when the
    config sets `default_site_enabled`."""
    config = config if config is not None else load_user_config(config_path)
    profiles = load_profiles(user_profile_dirs(config))
    path = str(config_path or user_config_path())
    for name in config.sites:
        if name not in profiles:
            raise ProfileError(
                path,
                f"sites.{name}",
                "no site profile has this name",
                _unknown_site_hint(name, profiles),
            )
    out: dict[str, Site] = {}
    for name, profile in profiles.items():
        user = config.sites.get(name)
        if user is None:
            user = _enabled_by_source(profile)
            if user is None and not config.default_site_enabled:
                continue
            user = user if user is not None else UserSiteConfig()
        if user.enabled:
            out[name] = Site(profile, user)
    return out


def _enabled_by_source(profile: SiteProfile) -> UserSiteConfig | None:
    """The first profile source's settings for a site no config names, if one enables it."""
    for source in profile_sources():
        user = source.enables(profile)
        if user is not None:
            return user
    return None
