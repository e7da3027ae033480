"""fedhpc as a service for a team: the HTTP MCP face as an OAuth 2.1 resource server."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions

from fedhpc.domain.service import SCOPES, ServiceConfig
from fedhpc.errors import UsageError
from fedhpc.profiles.loader import load_user_config, user_config_path
from fedhpc.service.access import (
    METHOD_SCOPES,
    TOOL_SCOPES,
    Caller,
    InsufficientScope,
    caller_from_token,
    caller_of,
    needed_scope,
)
from fedhpc.service.verifier import KeyCache, OidcVerifier
from fedhpc.settings import fedhpc_home

if TYPE_CHECKING:
    from fedhpc.service.facade import Facade
    from fedhpc.service.facade_tokens import FacadeVerifier

__all__ = [
    "METHOD_SCOPES",
    "SCOPES",
    "SIGN_IN_SCOPES",
    "TOOL_SCOPES",
    "Caller",
    "InsufficientScope",
    "KeyCache",
    "OidcVerifier",
    "ServiceAuth",
    "ServiceConfig",
    "caller_from_token",
    "caller_of",
    "load_service",
    "needed_scope",
]


# What the metadata tells clients to ask for at sign-in: the everyday capabilities, not admin
# (an operator grants that deliberately). The SDK would list only the required scopes; a client
# then registers for fedhpc:read alone, and a provider that holds a client to its registered
# scopes refuses every later step-up to fedhpc:submit (seen with oidc-provider).
SIGN_IN_SCOPES = ("fedhpc:read", "fedhpc:submit", "fedhpc:data")


@dataclass(frozen=True, slots=True)
class ServiceAuth:
    """What `build_server` needs to serve as a resource server: the SDK's settings (protected
    resource metadata, required scopes, the 401 pointer) and the token verifier; with
    `[service.facade]`, the authorization server too (`facade`)."""

    config: ServiceConfig
    settings: AuthSettings
    verifier: OidcVerifier | FacadeVerifier
    facade: Facade | None = None

    @classmethod
    def from_config(cls, config: ServiceConfig, home: Path | None = None) -> ServiceAuth:
        if config.facade is not None:
            return _with_facade(config, home or fedhpc_home())
        # Validated from strings: AnyHttpUrl("https://idp.example") alone appends a "/", and
        # the metadata's issuer must equal the provider's own, character for character (RFC
        # 8414 3.3: the SDK's OAuth client refused the sign-in over that slash).
        settings = AuthSettings.model_validate(
            {
                "issuer_url": config.issuer,
                "resource_server_url": config.resource,
                "required_scopes": list(config.required_scopes),
                # OidcVerifier checks `aud` itself (PyJWT) and reports the resource it matched.
                "validate_token_resource": True,
            }
        )
        return cls(config=config, settings=settings, verifier=OidcVerifier(config))

    async def aclose(self) -> None:
        if self.facade is not None:
            await self.facade.aclose()
        else:
            await self.verifier.aclose()


def _secret(path: Path) -> str:
    """The upstream client's secret: a file only its owner may read."""
    try:
        mode = path.stat().st_mode
        text = path.read_text().strip()
    except OSError as exc:
        raise UsageError(
            f"the facade's client secret cannot be read: {exc}",
            hint="Write the secret fedhpc's upstream client was given to that file (0600).",
        ) from None
    if mode & 0o077:
        raise UsageError(
            f"{path} may be read by others",
            hint=f"chmod 600 {path}: it holds the upstream client's secret.",
        )
    if not text:
        raise UsageError(f"{path} is empty", hint="Write the upstream client's secret to it.")
    return text


def _with_facade(config: ServiceConfig, home: Path) -> ServiceAuth:
    """fedhpc as the authorization server: its own issuer (the resource's origin), client
    registration and revocation served by the SDK over the `Facade`."""
    # startup: the facade's store (aiosqlite) and keys load only when it is configured, so
    # importing the MCP server stays light (test_mcp_server checks what it loads)
    from fedhpc.service.facade import Facade
    from fedhpc.service.facade_store import FacadeStore, Sealer, load_fernet_key
    from fedhpc.service.facade_tokens import Signer, load_signing_key
    from fedhpc.service.upstream import Upstream

    facade = config.facade
    assert facade is not None
    folder = home / "facade"
    key_file = Path(facade.signing_key_file or folder / "signing-key.pem").expanduser()
    sealer_file = Path(facade.encryption_key_file or folder / "tokens.key").expanduser()
    secret = _secret(Path(facade.client_secret_file).expanduser())
    store = FacadeStore(folder / "facade.db", Sealer(load_fernet_key(sealer_file)))
    signer = Signer(config, load_signing_key(key_file))
    http = httpx2.AsyncClient(timeout=10.0, follow_redirects=False)
    upstream = Upstream(config, secret, http, KeyCache(config, http))
    provider = Facade(config, store, signer, upstream)
    scopes: list[Any] = [*SIGN_IN_SCOPES, "fedhpc:admin"]
    settings = AuthSettings.model_validate(
        {
            "issuer_url": config.own_issuer,
            "resource_server_url": config.resource,
            "required_scopes": list(config.required_scopes),
            "validate_token_resource": True,
            "client_registration_options": ClientRegistrationOptions(
                enabled=True, valid_scopes=scopes, default_scopes=list(SIGN_IN_SCOPES)
            ),
            "revocation_options": RevocationOptions(enabled=True),
        }
    )
    return ServiceAuth(config, settings, provider.verifier, provider)


def load_service(path: Path | None = None) -> ServiceAuth | None:
    """The `[service]` section of the user config as a ServiceAuth; None without one."""
    config = load_user_config(path or user_config_path()).service
    return ServiceAuth.from_config(config) if config is not None else None
