"""Globus authentication, owned here: the person's login (`fedhpc login`), the service
identity, and the apps the daemon's Compute transport and Transfer backend share. This package
is light: `apps` and `login` import the Globus SDKs and load only when Globus is used."""

from __future__ import annotations

from fedhpc.globus_auth.errors import (
    GlobusIdentityConfig,
    GlobusLoginFailed,
    GlobusLoginRequired,
    GlobusNoClient,
)
from fedhpc.globus_auth.identity import Identity, choose_identity
from fedhpc.globus_auth.scopes import data_access_scope, login_command, transfer_scope

__all__ = [
    "GlobusIdentityConfig",
    "GlobusLoginFailed",
    "GlobusLoginRequired",
    "GlobusNoClient",
    "Identity",
    "choose_identity",
    "data_access_scope",
    "login_command",
    "transfer_scope",
]
