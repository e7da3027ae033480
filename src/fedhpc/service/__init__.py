"""fedhpc as a service for a team: the HTTP MCP face as an OAuth 2.1 resource server."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mcp.server.auth.settings import AuthSettings

from fedhpc.domain.service import SCOPES, ServiceConfig
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

__all__ = [
    "METHOD_SCOPES",
    "SCOPES",
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


@dataclass(frozen=True, slots=True)
class ServiceAuth:
    """What `build_server` needs to serve as a resource server: the SDK's settings (protected
    resource metadata, required scopes, the 401 pointer) and the token verifier."""

    config: ServiceConfig
    settings: AuthSettings
    verifier: OidcVerifier

    @classmethod
    def from_config(cls, config: ServiceConfig) -> ServiceAuth:
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


def load_service(path: Path | None = None) -> ServiceAuth | None:
    """The `[service]` section of the user config as a ServiceAuth; None without one."""
    config = load_user_config(path or user_config_path()).service
    return ServiceAuth.from_config(config) if config is not None else None
