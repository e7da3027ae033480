"""The Globus scopes fedhpc asks for, and the exact `fedhpc login` command that grants one.
Pure strings: importing this module loads no Globus SDK."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence

__all__ = [
    "AUTH_RS",
    "COMPUTE_RS",
    "COMPUTE_SCOPE",
    "IDENTITY_SCOPES",
    "TRANSFER_RS",
    "TRANSFER_SCOPE",
    "data_access_scope",
    "is_collection_id",
    "login_command",
    "transfer_scope",
]

AUTH_RS = "auth.globus.org"
IDENTITY_SCOPES = ("openid", "profile", "email")
COMPUTE_RS = "funcx_service"
COMPUTE_SCOPE = "https://auth.globus.org/scopes/facd7ccc-c5f4-42aa-916b-a0e270e2c2a9/all"
TRANSFER_RS = "transfer.api.globus.org"
TRANSFER_SCOPE = "urn:globus:auth:scope:transfer.api.globus.org:all"

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def is_collection_id(value: str) -> bool:
    return bool(_UUID.match(value))


def data_access_scope(collection_id: str) -> str:
    """The consent a GCSv5 mapped collection needs before Transfer may touch its data."""
    return f"https://auth.globus.org/scopes/{collection_id.lower()}/data_access"


def transfer_scope(collections: Iterable[str] = ()) -> str:
    """Transfer with each collection's data_access as an optional dependency (the `*`: a
    collection that needs none, e.g. a guest collection, does not fail the login)."""
    deps = sorted({data_access_scope(c) for c in collections if is_collection_id(c)})
    if not deps:
        return TRANSFER_SCOPE
    return TRANSFER_SCOPE + "[" + " ".join(f"*{d}" for d in deps) + "]"


def login_command(
    scopes: Sequence[str] = (), *, domains: Sequence[str] = (), mfa: bool = False
) -> str:
    """The command a person runs to grant `scopes` (each shell-quoted: they hold brackets),
    in a session of the required identity domains (and with MFA) when Globus asks for one."""
    parts = ["fedhpc login", *(f"--scope {shlex.quote(s)}" for s in scopes)]
    parts += [f"--domain {shlex.quote(d)}" for d in domains]
    if mfa:
        parts.append("--mfa")
    return " ".join(parts)
