"""The user config's `[service]` section: the HTTP MCP face as an OAuth resource server."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

__all__ = ["SCOPES", "FacadeConfig", "ServiceConfig"]

# Scopes per capability (docs/service.md): read < submit, data; admin holds every other one.
SCOPES = ("fedhpc:read", "fedhpc:submit", "fedhpc:data", "fedhpc:admin")

Scope = Literal["fedhpc:read", "fedhpc:submit", "fedhpc:data", "fedhpc:admin"]
Domain = Annotated[
    str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$", max_length=253)
]
Subject = Annotated[
    str, StringConstraints(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f]+$")
]
# JWS algorithms a provider may sign with: asymmetric only (a shared-secret HS256 token would be
# forgeable by anyone holding the provider's client secret).
Algorithm = Literal["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]


def _is_loopback_http(url: str) -> bool:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme != "http":
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_url(name: str, url: str) -> str:
    parts = urlsplit(url)
    if not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"{name} must be an absolute URL without query or fragment: {url!r}")
    if parts.scheme != "https" and not _is_loopback_http(url):
        raise ValueError(f"{name} must be https (plain http only on loopback): {url!r}")
    return url


UpstreamScope = Annotated[str, StringConstraints(pattern=r"^[\x21\x23-\x5b\x5d-\x7e]{1,512}$")]


class FacadeConfig(BaseModel):
    """`[service.facade]`: fedhpc as the MCP clients' authorization server. People sign in at
    the upstream provider (`[service] issuer`) through a confidential client the operator
    registered there once; fedhpc issues its own tokens and keeps the upstream ones."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    client_id: str = Field(
        min_length=1, max_length=255, description="fedhpc's client id at the upstream provider"
    )
    client_secret_file: str = Field(
        min_length=1, description="a file (0600) holding that client's secret, nothing else"
    )
    scopes: tuple[UpstreamScope, ...] = Field(
        default=("openid", "email", "profile"),
        description="what fedhpc asks the upstream provider for (openid is always added; with "
        "Globus Auth add the Transfer and Compute scopes the person consents to)",
    )
    authorize_params: dict[str, str] = Field(
        default_factory=dict,
        description="extra parameters of the upstream authorization request, e.g. Globus "
        'Auth\'s {access_type = "offline"} for refresh tokens',
    )
    admin_subjects: tuple[Subject, ...] = Field(
        default=(), description="upstream subjects fedhpc grants fedhpc:admin when they ask"
    )
    access_token_ttl_s: int = Field(default=600, ge=30, le=3600)
    refresh_token_ttl_s: int = Field(default=30 * 86400, ge=300, le=365 * 86400)
    code_ttl_s: int = Field(default=120, ge=1, le=600, description="authorization codes' life")
    upstream_refresh_margin_s: int = Field(
        default=300,
        ge=0,
        le=30 * 86400,
        description="refresh an upstream token this long before it expires",
    )
    signing_key_file: str | None = Field(
        default=None,
        description="PEM private key fedhpc signs tokens with (made when missing; "
        "default <FEDHPC_HOME>/facade/signing-key.pem)",
    )
    encryption_key_file: str | None = Field(
        default=None,
        description="Fernet key sealing upstream tokens at rest (made when missing; "
        "default <FEDHPC_HOME>/facade/tokens.key)",
    )


class ServiceConfig(BaseModel):
    """Who may call fedhpc's HTTP MCP endpoint, and with which provider's tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    issuer: str = Field(description="the OIDC provider's issuer URL (its discovery document's)")
    resource: str = Field(
        description="fedhpc's own public MCP URL, e.g. https://fedhpc.example.org/mcp: the "
        "audience (RFC 8707) every token must name"
    )
    allowed_domains: tuple[Domain, ...] = Field(
        default=(), description="email domains whose people may call (the token's email claim)"
    )
    allowed_subjects: tuple[Subject, ...] = Field(
        default=(), description="provider subjects (`sub`) that may call, whatever their email"
    )
    required_scopes: tuple[Scope, ...] = Field(
        default=("fedhpc:read",), description="scopes every request needs, on top of per-tool ones"
    )
    algorithms: tuple[Algorithm, ...] = Field(
        default=("RS256", "ES256", "PS256", "EdDSA"), min_length=1
    )
    leeway_s: int = Field(default=30, ge=0, le=300, description="clock skew allowed on exp/nbf")
    jwks_min_refresh_s: float = Field(
        default=30.0, ge=0, le=3600, description="fetch the JWKS at most this often on unknown kids"
    )
    facade: FacadeConfig | None = Field(
        default=None,
        description="fedhpc as the authorization server, signing people in upstream (issuer)",
    )
    bind: str = Field(
        default="127.0.0.1:8765",
        pattern=r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$",
        description="host:port `fedhpc service` listens on, plain HTTP behind the TLS reverse "
        "proxy that serves `resource` (keep it on loopback or a private network)",
    )

    @model_validator(mode="after")
    def _checked(self) -> Self:
        _check_url("issuer", self.issuer)
        _check_url("resource", self.resource)
        if not self.allowed_domains and not self.allowed_subjects:
            # Any account of a public provider (Globus Auth, CILogon) would otherwise get in.
            raise ValueError(
                "name who may call: allowed_domains (email domains) or allowed_subjects"
            )
        port = int(self.bind.rsplit(":", 1)[1])
        if not 0 < port < 65536:
            raise ValueError(f"bind's port must be 1-65535: {self.bind!r}")
        return self

    @property
    def own_issuer(self) -> str:
        """The facade's issuer: the resource URL's origin (RFC 8414 metadata at its root)."""
        parts = urlsplit(self.resource)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def host_port(self) -> tuple[str, int]:
        """`bind` as (host, port), brackets of an IPv6 host removed."""
        host, port = self.bind.rsplit(":", 1)
        return host.strip("[]"), int(port)
