"""The local test federation's profile source (the `fedhpc.profiles` entry point `devfed`,
pyproject.toml): the `local_test` profiles (shipped here, in `site_profiles/`, not beside the
real centers), their `{devfed}` folder, their process and SSH variants, and the dev sites
`FEDHPC_DEVFED` enables without a user config."""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from fedhpc.domain.config import AccountConfig, UserSiteConfig
from fedhpc.domain.site import SAFE_NAME, SiteProfile
from fedhpc.settings import DEVFED, DEVFED_DIR, DEVFED_SSH_CONFIG, LOCALSCHED_ROOT, state_dir

__all__ = [
    "DEVFED_PROFILES",
    "DevfedProfiles",
    "dev_profiles_dir",
    "devfed_mode",
    "devfed_process_root",
    "devfed_root",
    "devfed_ssh_config",
    "ssh_config_hosts",
]


def dev_profiles_dir() -> Path:
    """The folder of the local test federation's profiles (package data of fedhpc_dev)."""
    return Path(str(resources.files("fedhpc_dev") / "site_profiles"))


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


class DevfedProfiles:
    """The local test federation as a profile source (fedhpc.profiles.sources.ProfileSource)."""

    def profile_dirs(self) -> tuple[Path, ...]:
        """The `local_test` profiles' folder, always read (like a shipped center, a dev site
        is enabled only by `FEDHPC_DEVFED` or a config entry)."""
        return (dev_profiles_dir(),)

    def rewrite(self, data: dict[str, Any]) -> dict[str, Any]:
        """Every profile's `{devfed}` is the federation's folder; a `local_test` Slurm profile
        runs as local processes in process mode (then `{devfed}` is the user's own folder),
        or goes through the SSH front when the front's ssh_config has its name."""
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
        return dict(_expand(data, {"devfed": str(root)}))

    def enables(self, profile: SiteProfile) -> UserSiteConfig | None:
        """The local-test sites of the scheduler `FEDHPC_DEVFED` names."""
        return _devfed_user(profile) if _devfed_enables(profile, devfed_mode()) else None


DEVFED_PROFILES = DevfedProfiles()
