"""Which Globus identity a service uses, and which native client a person logs in with.

Precedence, per service: `FEDHPC_GLOBUS_IDENTITY=user|service` forces one; otherwise (`auto`)
the service identity when both of that service's client-credential variables are set
(Compute: GLOBUS_COMPUTE_CLIENT_ID/SECRET; Transfer: GLOBUS_CLIENT_ID/SECRET), else the person
who ran `fedhpc login`. Pure: reads only the mapping it is given."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Literal

from fedhpc.globus_auth.errors import GlobusIdentityConfig, GlobusNoClient
from fedhpc.globus_auth.scopes import is_collection_id
from fedhpc.settings import GLOBUS_CLIENT_ID, GLOBUS_IDENTITY
from fedhpc.settings.others import (
    COMPUTE_CLIENT_ID,
    COMPUTE_CLIENT_SECRET,
    TRANSFER_CLIENT_ID,
    TRANSFER_CLIENT_SECRET,
)

__all__ = ["SERVICE_VARS", "Identity", "Service", "choose_identity", "pick_client_id"]

Service = Literal["compute", "transfer"]
SERVICE_VARS: dict[Service, tuple[str, str]] = {
    "compute": (COMPUTE_CLIENT_ID.name, COMPUTE_CLIENT_SECRET.name),
    "transfer": (TRANSFER_CLIENT_ID.name, TRANSFER_CLIENT_SECRET.name),
}
MODE_VAR = GLOBUS_IDENTITY.name
CLIENT_VAR = GLOBUS_CLIENT_ID.name


class Identity(StrEnum):
    USER = "user"  # the person's own tokens from `fedhpc login` (refresh tokens, rotated)
    SERVICE = "service"  # a confidential client's credentials (client-credentials grant)


def choose_identity(service: Service, env: Mapping[str, str]) -> Identity:
    id_var, secret_var = SERVICE_VARS[service]
    has_service = bool(env.get(id_var) and env.get(secret_var))
    mode = (GLOBUS_IDENTITY.read(env) or "auto").strip().lower()
    if mode == "user":
        return Identity.USER
    if mode == "service":
        if not has_service:
            raise GlobusIdentityConfig(
                f"{MODE_VAR}=service, but {id_var} and {secret_var} are not both set",
                hint=f"Export {id_var} and {secret_var}, or set {MODE_VAR}=user and run "
                "`fedhpc login`.",
            )
        return Identity.SERVICE
    if mode != "auto":
        raise GlobusIdentityConfig(f"{MODE_VAR}={mode!r} is not user, service or auto")
    return Identity.SERVICE if has_service else Identity.USER


def pick_client_id(explicit: str | None, stored: str | None, env: Mapping[str, str]) -> str:
    """The native client to log in with: `--client-id`, else FEDHPC_GLOBUS_CLIENT_ID, else the
    one of the last login, else GLOBUS_CLIENT_ID when it has no secret (a native client)."""
    legacy = TRANSFER_CLIENT_ID.read(env) if not TRANSFER_CLIENT_SECRET.read(env) else None
    for source, value in (
        ("--client-id", explicit),
        (CLIENT_VAR, GLOBUS_CLIENT_ID.read(env)),
        ("the last login", stored),
        (TRANSFER_CLIENT_ID.name, legacy),
    ):
        if value:
            if not is_collection_id(value):  # the same UUID shape
                raise GlobusNoClient(f"{source}: {value!r} is not a Globus client id (a UUID)")
            return value.lower()
    raise GlobusNoClient("no Globus native client id to log in with")
