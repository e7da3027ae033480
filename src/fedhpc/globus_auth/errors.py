"""Typed Globus authentication errors: each hint is the exact command that fixes it."""

from __future__ import annotations

from collections.abc import Sequence

from fedhpc.errors import ErrorKind, PermanentError, UsageError
from fedhpc.globus_auth.scopes import login_command

__all__ = ["GlobusIdentityConfig", "GlobusLoginFailed", "GlobusLoginRequired", "GlobusNoClient"]


class GlobusLoginRequired(PermanentError):
    """A person must log in (no tokens, revoked tokens) or grant a consent (a collection's
    data_access, a session requirement). The daemon never prompts: it reports this instead."""

    code = "globus_login_required"
    kind = ErrorKind.USAGE  # the person's move: run the command in the hint

    def __init__(
        self,
        message: str,
        *,
        scopes: Sequence[str] = (),
        domains: Sequence[str] = (),
        mfa: bool = False,
    ) -> None:
        self.scopes = tuple(scopes)
        self.command = login_command(self.scopes, domains=domains, mfa=mfa)
        super().__init__(
            message,
            hint=f"Run `{self.command}` in a terminal (it opens Globus' consent page), "
            "then submit again.",
        )


class GlobusNoClient(UsageError):
    """No native Globus client id to log in with."""

    code = "globus_client_id"
    default_hint = (
        "Register a native app ('thick client') at https://app.globus.org/settings/developers "
        "(or ask your center for fedhpc's), then run `fedhpc login --client-id <uuid>` or "
        "export FEDHPC_GLOBUS_CLIENT_ID."
    )


class GlobusLoginFailed(PermanentError):
    """The login flow did not produce tokens (bad or expired code, identity change)."""

    code = "globus_login_failed"
    kind = ErrorKind.USAGE
    default_hint = "Run `fedhpc login` again and paste the newest code (codes expire in minutes)."


class GlobusIdentityConfig(UsageError):
    """FEDHPC_GLOBUS_IDENTITY names an identity that cannot be used as configured."""

    code = "globus_identity"
    default_hint = (
        "Set FEDHPC_GLOBUS_IDENTITY to user (your `fedhpc login`), service (client "
        "credentials) or auto, or unset it."
    )
