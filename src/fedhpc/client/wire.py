"""One request to the daemon's REST API over its Unix socket: the person it is made for, its
time limit, and what an unanswered request means (client/errors.py)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Literal

import httpx2

from fedhpc.client.errors import AcceptedUnknown, DaemonTimeout, DaemonUnavailable, OutcomeUnknown
from fedhpc.daemon.api import Endpoint
from fedhpc.errors import HTTP_STATUS, ErrorKind, FedError
from fedhpc.settings import CLIENT_TIMEOUT_SCALE
from fedhpc.settings.daemon import DaemonSettings

__all__ = ["ACTING_FOR", "IDLE_REUSE_S", "TIMEOUTS", "DaemonWire", "Effect", "RemoteError"]

# (owner, admin) of the signed-in person the current call is made for (service mode: the MCP
# server sets it per request); the daemon records the owner on submissions and scopes reads
# to it (daemon/owner.py). None: the single-user default, no owner.
ACTING_FOR: ContextVar[tuple[str, bool] | None] = ContextVar("fedhpc_acting_for", default=None)

_KIND_OF_STATUS = {status: kind for kind, status in HTTP_STATUS.items()}

# An idle connection is reused for this long, well within the daemon's own keep-alive (5 s,
# `daemon.rest.KEEP_ALIVE_S`): at httpx's default (also 5 s) a request sent as the daemon
# closed the connection was lost on it ("sent to the daemon but the answer was lost").
IDLE_REUSE_S = 2.0


Effect = Literal["read", "change", "submit"]

# Seconds each call may take, from what the daemon does for it: reads answer from memory or the
# store; a submit is answered once durably accepted (plus a bounded wait for its placement); a
# group's acceptance writes one row per child; results, cancel and replan talk to a site.
TIMEOUTS: dict[str, float] = {
    "read": 15.0,
    "health": 5.0,
    "draft": 30.0,
    "submit": 30.0,
    "per_child": 0.01,
    "site": 60.0,
    "replan": 90.0,
}


class RemoteError(FedError):
    """An error the daemon answered with; keeps its code, and its class from the HTTP status."""

    def __init__(self, body: dict[str, Any], status: int = 500) -> None:
        super().__init__(str(body.get("message", "daemon error")), hint=body.get("hint"))
        self.code = str(body.get("code", "error"))  # type: ignore[misc]
        self.kind = _KIND_OF_STATUS.get(status, ErrorKind.INTERNAL)  # type: ignore[misc]
        self.body = body

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()
        if isinstance(self.body.get("fields"), list):
            out["fields"] = self.body["fields"]  # a validation error names its fields
        return out


def _scale(given: float | None) -> float:
    """The factor on every per-operation limit: `given`, else FEDHPC_CLIENT_TIMEOUT_SCALE, else
    1 (also for a value that is not a positive number below a million)."""
    scale = given
    if scale is None:
        try:
            scale = float(CLIENT_TIMEOUT_SCALE.get() or 1)
        except ValueError:
            scale = 1.0
    return scale if 0 < scale < 1e6 else 1.0


class DaemonWire:
    """The HTTP connection to one daemon and the one way requests go over it."""

    def __init__(
        self,
        settings: DaemonSettings,
        *,
        timeout_s: float | None = None,
        timeout_scale: float | None = None,
        http: httpx2.AsyncClient | None = None,
    ) -> None:
        """`timeout_s` caps every call (a hook must be quick); `timeout_scale` (default
        FEDHPC_CLIENT_TIMEOUT_SCALE, 1) stretches or shrinks the per-operation limits; `http`
        replaces the socket's HTTP client (a test's in-process app)."""
        self.settings = settings
        self.cap = timeout_s
        self.scale = _scale(timeout_scale)
        self.http = http or httpx2.AsyncClient(
            transport=httpx2.AsyncHTTPTransport(
                uds=str(settings.socket_path),
                limits=httpx2.Limits(keepalive_expiry=IDLE_REUSE_S),
            ),
            base_url="http://fedhpc",
            timeout=TIMEOUTS["site"] * self.scale,
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def call(
        self,
        route: Endpoint,
        *ids: str,
        limit_s: float = TIMEOUTS["read"],
        effect: Effect = "read",
        key: str | None = None,
        what: str = "",
        **kw: Any,
    ) -> Any:
        """One request. A request that may have reached the daemon but got no answer is never
        a bug: it is `DaemonTimeout` (a read), `OutcomeUnknown` (a change) or `AcceptedUnknown`
        (a submission, with the key to retry with)."""
        path = route.url(*ids)
        limit = limit_s * self.scale if self.cap is None else min(limit_s * self.scale, self.cap)
        acting = ACTING_FOR.get()
        if acting is not None:
            owner, admin = acting
            headers = {"x-fedhpc-owner": owner, **({"x-fedhpc-admin": "1"} if admin else {})}
            kw["headers"] = {**kw.get("headers", {}), **headers}
        # A read whose connection closed under it (the daemon killed or restarting, a
        # keep-alive closing) is asked once more on a new connection: it changes nothing, and
        # the second try tells a daemon that is gone (`DaemonUnavailable`) from one that is not.
        tries = 2 if effect == "read" else 1
        while True:
            tries -= 1
            try:
                resp = await self.http.request(route.method, path, timeout=limit, **kw)
            except (
                httpx2.ConnectError,
                httpx2.ConnectTimeout,
                httpx2.PoolTimeout,
                FileNotFoundError,
                ConnectionRefusedError,
            ) as exc:
                raise DaemonUnavailable(f"no daemon at {self.settings.socket_path}") from exc
            except httpx2.TransportError as exc:
                if tries and not isinstance(exc, httpx2.TimeoutException):
                    continue
                raise _unanswered(
                    exc, what or path, limit, effect=effect, key=key, tool=what
                ) from exc
            break
        try:
            body = resp.json()
        except ValueError:
            body = {"code": "daemon_error", "message": f"HTTP {resp.status_code} from the daemon"}
        if resp.status_code >= 400:
            raise RemoteError(
                body if isinstance(body, dict) else {"message": str(body)}, resp.status_code
            )
        return body


def _unanswered(
    exc: httpx2.TransportError,
    what: str,
    limit: float,
    *,
    effect: Effect,
    key: str | None,
    tool: str,
) -> FedError:
    """What a request sent (`what`: the tool, else the path) but never answered means, by its
    effect."""
    timed_out = isinstance(exc, httpx2.TimeoutException)
    lost = f"no answer came within {limit:g} s" if timed_out else "the answer was lost"
    sent = f"{what} was sent to the daemon but {lost}"
    if effect == "submit" and key:
        return AcceptedUnknown(
            f"{sent}: it may have been accepted", idempotency_key=key, tool=tool or "the submit"
        )
    if effect == "read":
        return DaemonTimeout(sent)
    return OutcomeUnknown(
        f"{sent}: it may have taken effect",
        hint="Check the task or transfer (get_result, fedhpc://...) before sending again.",
    )
