"""`fedhpc login`, `--status` and `logout`: the person's side of Globus auth. One login asks
for every scope fedhpc needs (identity, Compute, Transfer with the data_access consents of the
configured collections); refresh tokens go to `$FEDHPC_HOME/globus/` (0700/0600)."""

from __future__ import annotations

import os
import sys
import webbrowser
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import globus_sdk
from globus_sdk.gare import GlobusAuthorizationParameters
from globus_sdk.login_flows import CommandLineLoginFlowEOFError, CommandLineLoginFlowManager
from globus_sdk.scopes import ScopeParser
from globus_sdk.token_storage.validating_token_storage import IdentityMismatchError

from fedhpc.globus_auth.apps import APP_NAME
from fedhpc.globus_auth.errors import GlobusLoginFailed, GlobusNoClient
from fedhpc.globus_auth.identity import SERVICE_VARS, choose_identity, pick_client_id
from fedhpc.globus_auth.scopes import (
    AUTH_RS,
    COMPUTE_RS,
    COMPUTE_SCOPE,
    IDENTITY_SCOPES,
    TRANSFER_RS,
    transfer_scope,
)
from fedhpc.globus_auth.store import (
    LoginRecord,
    open_token_storage,
    private_dir,
    read_record,
    remove_login,
    tokens_path,
    write_record,
)

__all__ = ["default_requirements", "login", "logout", "status"]


def default_requirements(collections: Iterable[str]) -> dict[str, list[str]]:
    """What every login asks for, by resource server."""
    return {
        AUTH_RS: list(IDENTITY_SCOPES),
        COMPUTE_RS: [COMPUTE_SCOPE],
        TRANSFER_RS: [transfer_scope(collections)],
    }


def _browser_available(env: Mapping[str, str]) -> bool:
    """A graphical browser on this machine (not over ssh): open the URL for the person."""
    if env.get("SSH_CONNECTION") or env.get("SSH_TTY"):
        return False
    if sys.platform != "darwin" and not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        return False
    try:
        return not isinstance(webbrowser.get(), webbrowser.GenericBrowser)
    except webbrowser.Error:
        return False


class _PasteCodeFlow(CommandLineLoginFlowManager):
    """Prints the URL (and opens it where a browser exists); the person pastes the code."""

    def __init__(self, login_client: globus_sdk.NativeAppAuthClient, *, browser: bool) -> None:
        super().__init__(
            login_client,
            request_refresh_tokens=True,
            native_prefill_named_grant=f"{APP_NAME} on {os.uname().nodename}",
        )
        self.browser = browser

    def print_authorize_url(self, authorize_url: str) -> None:
        print("Log in to Globus and consent to fedhpc's access at this address:")
        print(authorize_url, flush=True)
        if self.browser and webbrowser.open(authorize_url):
            print("(opened in your browser)", flush=True)

    def prompt_for_code(self) -> str:
        with self._handle_input_errors():
            return input("Paste the authorization code here: ").strip()


def login(
    home: Path,
    *,
    collections: Iterable[str],
    extra_scopes: Sequence[str] = (),
    domains: Sequence[str] = (),
    mfa: bool = False,
    client_id: str | None = None,
    browser: bool | None = None,
    env: Mapping[str, str] | None = None,
) -> LoginRecord:
    """Run the native-app (PKCE) flow once for every scope; store tokens; record who."""
    env = os.environ if env is None else env
    prior = read_record(home)
    cid = pick_client_id(client_id, prior.client_id if prior else None, env)
    if prior is not None and prior.client_id != cid:
        raise GlobusNoClient(
            f"you are logged in through client {prior.client_id}; refresh tokens belong to one "
            "client",
            hint="Run `fedhpc logout` first, then log in with the new client.",
        )
    for text in extra_scopes:
        try:
            ScopeParser.parse(text)
        except Exception as exc:
            raise GlobusLoginFailed(
                f"--scope {text!r} is not a Globus scope: {exc}",
                hint="Copy the scope from the error that named it.",
            ) from None
    storage = open_token_storage(home, create=True)
    assert storage is not None
    login_client = globus_sdk.NativeAppAuthClient(client_id=cid, app_name=APP_NAME)
    open_browser = _browser_available(env) if browser is None else browser
    config = globus_sdk.GlobusAppConfig(
        token_storage=storage,
        request_refresh_tokens=True,
        token_validation_error_handler=None,
        login_flow_manager=_PasteCodeFlow(login_client, browser=open_browser),
    )
    requirements = default_requirements(collections)
    asked = [
        *(s for scopes in requirements.values() for s in scopes),
        *(prior.scopes if prior else []),
        *extra_scopes,
    ]
    asked = list(dict.fromkeys(asked))
    params = GlobusAuthorizationParameters(
        required_scopes=asked,
        session_required_single_domain=list(domains) or None,
        session_required_mfa=mfa or None,
    )
    with globus_sdk.UserApp(
        APP_NAME, login_client=login_client, scope_requirements=requirements, config=config
    ) as app:
        try:
            app.login(auth_params=params, force=True)
        except CommandLineLoginFlowEOFError:
            raise GlobusLoginFailed("no authorization code was entered") from None
        except IdentityMismatchError:
            raise GlobusLoginFailed(
                "you logged in as a different Globus identity than the stored one",
                hint="Run `fedhpc logout` first to switch identities.",
            ) from None
        except globus_sdk.GlobusAPIError as exc:
            raise GlobusLoginFailed(
                f"Globus Auth refused the login ({exc.http_status} {exc.code})"
            ) from None
        except globus_sdk.NetworkError as exc:
            raise GlobusLoginFailed(
                f"could not reach Globus Auth ({type(exc).__name__})",
                hint="Check the network, then run `fedhpc login` again.",
            ) from None
        record = LoginRecord(
            client_id=cid,
            scopes=asked,
            logged_in_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        auth = storage.get_token_data(AUTH_RS)
        record.identity_id = auth.identity_id if auth else None
        try:
            info = globus_sdk.AuthClient(app=app).userinfo()
            record.username = info.get("preferred_username")
            record.name, record.email = info.get("name"), info.get("email")
            record.identity_id = info.get("sub") or record.identity_id
        except (globus_sdk.GlobusAPIError, globus_sdk.NetworkError):
            pass  # the identity id from the token suffices; names are for --status only
    storage.close()
    tokens_path(home).chmod(0o600)
    write_record(home, record)
    return record


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


def status(
    home: Path, *, env: Mapping[str, str] | None = None, now: float | None = None
) -> dict[str, Any]:
    """Who is logged in, which scopes each token holds, when access tokens expire, and which
    identity the daemon uses for each service. Offline; never shows a token."""
    env = os.environ if env is None else env
    now = datetime.now(UTC).timestamp() if now is None else now
    record = read_record(home)
    storage = open_token_storage(home, create=False) if record is not None else None
    tokens: list[dict[str, Any]] = []
    if storage is not None:
        for rs, data in sorted(storage.get_token_data_by_resource_server().items()):
            tokens.append(
                {
                    "resource_server": rs,
                    "scopes": data.scope.split(),
                    "access_token_expires_at": _iso(data.expires_at_seconds),
                    "access_token_expired": data.expires_at_seconds <= now,
                    "refreshable": bool(data.refresh_token),
                }
            )
        storage.close()
    identities: dict[str, str] = {}
    for service, (id_var, _secret) in SERVICE_VARS.items():
        try:
            chosen = choose_identity(service, env).value
        except Exception as exc:
            chosen = f"error: {exc}"
        identities[service] = chosen if chosen != "service" else f"service ({id_var})"
    out: dict[str, Any] = {"logged_in": bool(record and tokens), "daemon_uses": identities}
    if record is not None:
        out.update(
            client_id=record.client_id,
            identity_id=record.identity_id,
            username=record.username,
            name=record.name,
            email=record.email,
            logged_in_at=record.logged_in_at,
            requested_scopes=record.scopes,
        )
    out["tokens"] = tokens
    out["token_file"] = str(tokens_path(home))
    return out


def logout(home: Path) -> dict[str, Any]:
    """Revoke every stored token at Globus, then delete them (also when revoking failed:
    the local copy goes either way, and the answer says what was not revoked)."""
    record = read_record(home)
    storage = open_token_storage(home, create=False)
    revoked: list[str] = []
    failed: list[str] = []
    if storage is not None:
        stored = storage.get_token_data_by_resource_server()
        storage.close()
        if record is not None and stored:
            client = globus_sdk.NativeAppAuthClient(client_id=record.client_id, app_name=APP_NAME)
            for rs, data in sorted(stored.items()):
                try:
                    for token in (data.refresh_token, data.access_token):
                        if token:
                            client.oauth2_revoke_token(token)
                    revoked.append(rs)
                except (globus_sdk.GlobusAPIError, globus_sdk.NetworkError):
                    failed.append(rs)
        elif stored:
            failed.extend(sorted(stored))  # no client id recorded: cannot revoke
    removed = remove_login(home)
    if removed:
        private_dir(tokens_path(home).parent)
    return {
        "revoked": revoked,
        "not_revoked": failed,
        "removed": [str(p) for p in removed],
        "was_logged_in": record is not None,
    }
