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

from fedhpc.domain.config import AccountConfig, Site, UserConfig, UserSiteConfig
from fedhpc.domain.site import SAFE_NAME, SiteProfile
from fedhpc.errors import ProfileError
from fedhpc.settings import (
    CONFIG,
    DEVFED,
    DEVFED_DIR,
    DEVFED_SSH_CONFIG,
    LOCALSCHED_ROOT,
    fedhpc_home,
    state_dir,
)

__all__ = [
    "devfed_mode",
    "devfed_process_root",
    "devfed_ssh_config",
    "load_federation",
    "load_profile",
    "load_profiles",
    "load_user_config",
    "shipped_profiles_dir",
    "ssh_config_hosts",
    "user_config_path",
    "user_profile_dirs",
    "user_profiles_dir",
]

M = TypeVar("M", bound=BaseModel)


def shipped_profiles_dir() -> Path:
    """The folder of profiles that ship inside the package."""
    return Path(str(resources.files("fedhpc") / "site_profiles"))


def devfed_root() -> Path:
    """Where the local test federation keeps its clusters (`$FEDHPC_DEVFED_DIR`)."""
    return Path(DEVFED_DIR.get() or "")


def devfed_mode() -> str | None:
    """Which local federation `FEDHPC_DEVFED` enables: 'slurm' (=1), 'process' (=process),
    'pbs' (=pbs: devpolaris only) or 'slurm+pbs' (=slurm+pbs: all five)."""
    modes = {"1": "slurm", "process": "process", "pbs": "pbs", "slurm+pbs": "slurm+pbs"}
    return modes.get(DEVFED.read() or "")


def _devfed_user(profile: SiteProfile) -> UserSiteConfig:
    """A local-test site enabled without a config entry. PBS keeps no account associations
    the probe could read (Slurm's sshare does), so devpolaris gets the one account its profile
    names, as a user's `[[sites.NAME.accounts]]` would give it."""
    name = profile.conventions.account_pattern
    if profile.dialect == "pbs" and name and SAFE_NAME.match(name):
        return UserSiteConfig(accounts=(AccountConfig(name=name),))
    return UserSiteConfig()


def _devfed_enables(profile: SiteProfile, mode: str | None) -> bool:
    """A local-test profile is enabled by the modes naming its scheduler (process mode runs
    the Slurm ones as local processes; the PBS one, devpolaris, needs its real server)."""
    if mode is None or not profile.local_test:
        return False
    kind = "pbs" if profile.dialect == "pbs" else "slurm"
    return kind in mode.split("+") or (mode == "process" and kind == "slurm")


def _writable(path: Path) -> bool:
    """`path` is (or could be created as) a folder we may write in."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)


def devfed_process_root() -> Path:
    """Where the process-mode dev sites keep scheduler state and storage: `$FEDHPC_DEVFED_DIR`
    when it is set and writable, else a folder of the user's own
    (`$XDG_STATE_HOME/fedhpc/devfed`), so any user can run them and the Slurm federation's
    root-owned folder is never written by them."""
    env = DEVFED_DIR.read()
    if env and _writable(Path(env)):
        return Path(env)
    return state_dir() / "fedhpc" / "devfed"


def _as_process_site(data: dict[str, Any]) -> dict[str, Any]:
    """A local-test profile run by fedhpc_dev.localsched instead of Slurm: same name, partitions
    and capacities; the scheduler's state in `{devfed}/<site>/localsched`."""
    name = str(data.get("name", ""))
    return {
        **data,
        "dialect": "process",
        "title": f"{data.get('title', name)}, jobs as local processes",
        "transport": {
            "kind": "local",
            "env": {LOCALSCHED_ROOT.name: "{devfed}/" + name + "/localsched"},
        },
    }


def devfed_ssh_config() -> Path | None:
    """The ssh_config of the devfed SSH front (`$FEDHPC_DEVFED_SSH_CONFIG`), if one is set."""
    env = DEVFED_SSH_CONFIG.read()
    return Path(env) if env else None


def _as_ssh_site(data: dict[str, Any], ssh_config: Path) -> dict[str, Any]:
    """A local-test Slurm profile reached through the SSH front, as a real center is: the host
    is the Host alias of the front's ssh_config, and the login (not the transport) sets
    SLURM_CONF."""
    name = str(data.get("name", ""))
    return {
        **data,
        "title": f"{data.get('title', name)}, over ssh",
        "transport": {"kind": "ssh", "host": name, "options": {"config_file": str(ssh_config)}},
    }


def ssh_config_hosts(ssh_config: Path) -> frozenset[str]:
    """The names of the `Host` entries of an ssh_config (patterns excluded); none when it
    cannot be read."""
    try:
        text = ssh_config.read_text()
    except OSError:
        return frozenset()
    names: set[str] = set()
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0].lower() == "host":
            names.update(w for w in words[1:] if not any(c in w for c in "*?!"))
    return frozenset(names)


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


def _expand(value: Any, subs: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for key, sub in subs.items():
            value = value.replace("{" + key + "}", sub)
        return value
    if isinstance(value, dict):
        return {k: _expand(v, subs) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, subs) for v in value]
    return value


def _validate(model: type[M], data: dict[str, Any], path: Path) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _first_error(path, exc) from None


def load_profile(path: Path) -> SiteProfile:
    """One profile; the file's stem must equal its `name`."""
    data = _read_toml(path)
    root = devfed_root()
    slurm_test = data.get("local_test") is True and data.get("dialect", "slurm") == "slurm"
    if slurm_test and devfed_mode() == "process":
        data, root = _as_process_site(data), devfed_process_root()
    elif (
        data.get("local_test") is True
        and (front := devfed_ssh_config()) is not None
        and str(data.get("name")) in ssh_config_hosts(front)
    ):
        data = _as_ssh_site(data, front)
    data = _expand(data, {"devfed": str(root)})
    profile = _validate(SiteProfile, data, path)
    if profile.name != path.stem:
        raise ProfileError(str(path), "name", f"is {profile.name!r} but the file is {path.name}")
    return profile


def load_profiles(dirs: Iterable[Path] | None = None) -> dict[str, SiteProfile]:
    """Shipped profiles, then each folder in order; a later file with the same name wins."""
    folders = [shipped_profiles_dir(), *(dirs or [])]
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
    """Every site that is enabled: named in the user's config, or every local-test site when
    `FEDHPC_DEVFED=1` (Slurm) or `=process` (local processes), or every profile when the
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
    mode = devfed_mode()
    for name, profile in profiles.items():
        user = config.sites.get(name)
        if user is None:
            if not (config.default_site_enabled or _devfed_enables(profile, mode)):
                continue
            user = _devfed_user(profile) if _devfed_enables(profile, mode) else UserSiteConfig()
        if user.enabled:
            out[name] = Site(profile, user)
    return out
