"""Globus apps and service clients for the daemon: the person's tokens (a UserApp that never
prompts) or a service identity, shared by Compute and Transfer. Imports the SDKs; load it
only where a configured site or transfer uses Globus."""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.from_thread
import globus_sdk
from globus_sdk.authorizers import GlobusAuthorizer
from globus_sdk.gare import GlobusAuthorizationParameters, to_gare
from globus_sdk.login_flows import LoginFlowManager
from globus_sdk.scopes import Scope, ScopeParser
from globus_sdk.token_storage import MemoryTokenStorage, TokenValidationError
from globus_sdk.token_storage.validating_token_storage import (
    MissingTokenError,
    UnmetScopeRequirementsError,
)

from fedhpc.errors import FedError
from fedhpc.globus_auth.errors import GlobusLoginRequired
from fedhpc.globus_auth.identity import SERVICE_VARS, Identity, Service, choose_identity
from fedhpc.globus_auth.people import PersonService, PersonTokens
from fedhpc.globus_auth.store import LoginRecord, open_token_storage, read_record

if TYPE_CHECKING:
    from globus_compute_sdk import Client as ComputeSDKClient

__all__ = [
    "APP_NAME",
    "compute_client",
    "daemon_user_app",
    "login_required",
    "person_compute_client",
    "person_transfer_client",
    "reset",
    "transfer_client",
    "translate",
    "uncovered",
]

APP_NAME = "fedhpc"


# -- scope bookkeeping ------------------------------------------------------------------------


def _covered(req: Scope, asked: Sequence[Scope]) -> bool:
    return any(
        a.scope_string == req.scope_string
        and all(_covered(d, a.dependencies) for d in req.dependencies)
        for a in asked
    )


def uncovered(required: Sequence[str], asked: Sequence[str]) -> list[str]:
    """The required scopes the last login did not ask for (so the hint names only those)."""
    asked_scopes = [s for text in asked for s in ScopeParser.parse(text)]
    out: list[str] = []
    for text in required:
        for scope in ScopeParser.parse(text):
            if not _covered(scope, asked_scopes) and str(scope) not in out:
                out.append(str(scope))
    return out


def login_required(
    reason: str, params: GlobusAuthorizationParameters | None, record: LoginRecord | None
) -> GlobusLoginRequired:
    """One typed error for every way Globus asks for a person, whose command fixes it."""
    required = list(params.required_scopes or []) if params else []
    scopes = uncovered(required, record.scopes if record else [])
    domains = list(params.session_required_single_domain or []) if params else []
    mfa = bool(params.session_required_mfa) if params else False
    if scopes:
        reason += "; consent needed for " + ", ".join(scopes)
    if domains:
        reason += "; a session in " + ", ".join(domains) + " is required"
    return GlobusLoginRequired(reason, scopes=scopes, domains=domains, mfa=mfa)


def translate(exc: BaseException, home: Path | None = None) -> FedError | None:
    """A Globus auth failure as GlobusLoginRequired, or None when it is not one. Never carries
    request data (headers, bodies): only codes, scopes and domains."""
    record = read_record(home) if home is not None else None
    if isinstance(exc, UnmetScopeRequirementsError):
        wanted = [str(s) for scopes in exc.scope_requirements.values() for s in scopes]
        params = GlobusAuthorizationParameters(required_scopes=wanted)
        return login_required("the stored Globus login lacks a consent", params, record)
    if isinstance(exc, MissingTokenError):
        return login_required(
            f"no Globus login for {exc.resource_server or 'this service'}", None, record
        )
    if isinstance(exc, TokenValidationError):
        return login_required(
            f"the stored Globus login is unusable ({type(exc).__name__})", None, record
        )
    if isinstance(exc, globus_sdk.AuthAPIError) and exc.http_status in (400, 401):
        body = exc.raw_json if isinstance(exc.raw_json, dict) else {}
        refused = "invalid_grant" in (exc.code, body.get("error"))  # OAuth puts it in "error"
    else:
        refused = False
    if refused:
        return login_required("Globus refused the stored login (expired or revoked)", None, record)
    if isinstance(exc, globus_sdk.GlobusAPIError) and exc.http_status == 403:
        gare = to_gare(exc)
        if gare is not None:
            return login_required(
                f"Globus requires a new consent ({exc.code})", gare.authorization_parameters, record
            )
    return None


# -- the person's app, for the daemon ---------------------------------------------------------


class _NeverPrompt(LoginFlowManager):
    """The daemon's login flow: instead of reading stdin, it says which command to run."""

    def __init__(self, login_client: globus_sdk.NativeAppAuthClient, home: Path) -> None:
        super().__init__(login_client, request_refresh_tokens=True)
        self.home = home

    def run_login_flow(
        self, auth_parameters: GlobusAuthorizationParameters
    ) -> globus_sdk.OAuthTokenResponse:
        raise login_required("Globus asks for a login", auth_parameters, read_record(self.home))


class _SerialAuthorizer(GlobusAuthorizer):
    """Refreshing rotates the refresh token: two threads refreshing at once would lose one.
    GlobusApp is not thread safe, and the daemon calls the SDK from worker threads."""

    def __init__(self, inner: GlobusAuthorizer, lock: threading.RLock) -> None:
        self._inner, self._lock = inner, lock

    def get_authorization_header(self) -> str | None:
        with self._lock:
            return self._inner.get_authorization_header()

    def handle_missing_authorization(self) -> bool:
        with self._lock:
            return self._inner.handle_missing_authorization()


class _DaemonUserApp(globus_sdk.UserApp):
    # Re-entrant: validating a dependent scope fetches consents through this same app.
    _serial = threading.RLock()

    def get_authorizer(self, resource_server: str) -> GlobusAuthorizer:
        with self._serial:
            inner = super().get_authorizer(resource_server)
        return _SerialAuthorizer(inner, self._serial)


_lock = threading.Lock()
_user_apps: dict[str, tuple[str, globus_sdk.UserApp]] = {}
_clients: dict[tuple[str, str], Any] = {}


def _stamp(record: LoginRecord) -> str:
    return f"{record.client_id}|{record.identity_id}|{record.logged_in_at}"


def daemon_user_app(home: Path) -> globus_sdk.UserApp:
    """The person's app over `$FEDHPC_HOME/globus/tokens.db`, one per login: a new
    `fedhpc login` (or a logout) is picked up by the next call, without a daemon restart."""
    record = read_record(home)
    if record is None:
        raise GlobusLoginRequired("nobody is logged in to Globus for fedhpc")
    with _lock:
        cached = _user_apps.get(str(home))
        if cached is not None and cached[0] == _stamp(record):
            return cached[1]
        storage = open_token_storage(home, create=False)
        if storage is None:
            raise GlobusLoginRequired("the Globus login's token database is missing")
        login_client = globus_sdk.NativeAppAuthClient(client_id=record.client_id, app_name=APP_NAME)
        config = globus_sdk.GlobusAppConfig(
            token_storage=storage,
            request_refresh_tokens=True,
            token_validation_error_handler=None,  # the default would start a login on stdin
            login_flow_manager=_NeverPrompt(login_client, home),
            auto_redrive_gares=False,
        )
        app = _DaemonUserApp(APP_NAME, login_client=login_client, config=config)
        _user_apps[str(home)] = (_stamp(record), app)
        return app


def _service_key(service: Service, env: Mapping[str, str]) -> tuple[str, str]:
    """Cache key of a service identity: a changed id or secret gets a new client."""
    id_var, secret_var = SERVICE_VARS[service]
    digest = hashlib.sha256(f"{env[id_var]}:{env[secret_var]}".encode()).hexdigest()
    return (f"{service}-service", digest)


def _service_app(service: Service, env: Mapping[str, str]) -> globus_sdk.ClientApp:
    id_var, secret_var = SERVICE_VARS[service]
    config = globus_sdk.GlobusAppConfig(
        token_storage=MemoryTokenStorage(), token_validation_error_handler=None
    )
    return globus_sdk.ClientApp(
        APP_NAME, client_id=env[id_var], client_secret=env[secret_var], config=config
    )


def transfer_client(home: Path, env: Mapping[str, str] | None = None) -> globus_sdk.TransferClient:
    """A TransferClient that never prompts, under the identity `choose_identity` picks."""
    env = os.environ if env is None else env
    if choose_identity("transfer", env) is Identity.SERVICE:
        key = _service_key("transfer", env)
        with _lock:
            if key not in _clients:
                _clients[key] = globus_sdk.TransferClient(app=_service_app("transfer", env))
            return _clients[key]  # type: ignore[no-any-return]
    app = daemon_user_app(home)
    with _lock:
        key = ("transfer-user", str(id(app)))
        if key not in _clients:
            _clients[key] = globus_sdk.TransferClient(app=app)
        return _clients[key]  # type: ignore[no-any-return]


def compute_client(home: Path, env: Mapping[str, str] | None = None) -> ComputeSDKClient:
    """A Globus Compute Client that never prompts. The service identity is the SDK's own path
    (it builds a ClientApp from GLOBUS_COMPUTE_CLIENT_ID/SECRET); the person's is our app."""
    # startup: the Globus SDKs only when a Globus site or login is used
    from globus_compute_sdk import Client

    env = os.environ if env is None else env
    if choose_identity("compute", env) is Identity.SERVICE:
        key = _service_key("compute", env)
        with _lock:
            if key not in _clients:
                # do_version_check=False: one fewer network call that could fail a site.
                _clients[key] = Client(do_version_check=False)
            return _clients[key]  # type: ignore[no-any-return]
    app = daemon_user_app(home)
    with _lock:
        key = ("compute-user", str(id(app)))
        if key not in _clients:
            _clients[key] = Client(app=app, do_version_check=False)
        return _clients[key]  # type: ignore[no-any-return]


class _PersonAuthorizer(GlobusAuthorizer):
    """A person's token from the service's store (`PersonTokens`), asked at every request: a
    refresh the service made meanwhile is used at once. The SDK calls this from the worker
    thread the transport runs it in, so the async store is reached through `from_thread`."""

    def __init__(self, tokens: PersonTokens, person: str, service: PersonService) -> None:
        self._tokens, self._person, self._service = tokens, person, service

    def get_authorization_header(self) -> str:
        token = anyio.from_thread.run(self._tokens.access_token, self._person, self._service)
        return f"Bearer {token}"

    def handle_missing_authorization(self) -> bool:
        return False  # a 401 is the endpoint's answer: the transport reports it


_PERSON_CLIENTS = 64  # the most people whose Compute clients one process keeps
_person_clients: OrderedDict[tuple[int, str], Any] = OrderedDict()


def _kept(key: tuple[int, str], make: Callable[[], Any]) -> Any:
    """The person's client under `key`, made once; the least recently used dropped past
    `_PERSON_CLIENTS`."""
    with _lock:
        client = _person_clients.get(key)
        if client is None:
            client = _person_clients[key] = make()
        _person_clients.move_to_end(key)
        while len(_person_clients) > _PERSON_CLIENTS:
            _person_clients.popitem(last=False)
        return client


def person_compute_client(tokens: PersonTokens, person: str) -> ComputeSDKClient:
    """A Globus Compute Client that authorizes as `person` (service mode, a per-person site)."""
    # startup: the Globus SDKs only when a Globus site or login is used
    from globus_compute_sdk import Client

    authorizer = _PersonAuthorizer(tokens, person, "compute")
    client: ComputeSDKClient = _kept(
        (id(tokens), f"compute|{person}"),
        lambda: Client(authorizer=authorizer, do_version_check=False),
    )
    return client


def person_transfer_client(tokens: PersonTokens, person: str) -> globus_sdk.TransferClient:
    """A TransferClient that authorizes as `person` (a transfer touching a per-person site)."""
    authorizer = _PersonAuthorizer(tokens, person, "transfer")
    client: globus_sdk.TransferClient = _kept(
        (id(tokens), f"transfer|{person}"),
        lambda: globus_sdk.TransferClient(authorizer=authorizer),
    )
    return client


def reset() -> None:
    """Forget every cached app and client (tests; a process that changed its environment)."""
    with _lock:
        _user_apps.clear()
        _clients.clear()
        _person_clients.clear()
