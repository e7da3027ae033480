"""Site profiles (shipped TOML) and the user's config, joined into enabled sites
(`fedhpc.domain.config.Site`)."""

from fedhpc.profiles.loader import (
    load_federation,
    load_profile,
    load_profiles,
    load_user_config,
    shipped_profile_dirs,
    shipped_profiles_dir,
    user_config_path,
)

__all__ = [
    "load_federation",
    "load_profile",
    "load_profiles",
    "load_user_config",
    "shipped_profile_dirs",
    "shipped_profiles_dir",
    "user_config_path",
]
