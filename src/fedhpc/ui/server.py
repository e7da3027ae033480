"""`fedhpc ui`'s web server: a read-only dashboard on loopback, in the CLI process.

Every request must name a loopback host (no DNS rebinding); a read of the API under /api/ must
also carry the dashboard's random token in the `X-Fedhpc-Token` header (the page takes it from
the printed URL's `?token=` into sessionStorage: no cookie, since cookies ignore ports and would
reach any other server on 127.0.0.1). The page and its files hold no data and are served without
the token. The API only reads the daemon's REST API, with bounded answers; a typed error (the
daemon's own, or one raised inside a task group here) is answered as `{code, message, hint}`
with its kind's HTTP status (docs/errors.md): an unknown task id is a 404, a stopped daemon a
503. The pages and their JavaScript libraries ship inside the package (static/): nothing is
fetched from elsewhere."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.errors import HTTP_STATUS, typed_error
from fedhpc.ops.tasks import ResultRequest
from fedhpc.ui.charges import charges_route
from fedhpc.ui.data import (
    MAX_GROUPS,
    TASK_PAGE,
    group_manifests,
    group_summaries,
    manifest,
    task_page,
)
from fedhpc.ui.estimators import with_auto
from fedhpc.ui.pending import predicted_start
from fedhpc.ui.timeline import bar_json, bars

__all__ = ["STATIC", "Gate", "build_ui_app", "delivery_status"]

log = structlog.get_logger(__name__)

STATIC = Path(__file__).parent / "static"
EVENTS_TAIL = 200
OUTPUT_TAIL = 4096  # bytes of a task's output the page shows, when asked

# The page's own files and the vendored libraries: nothing else is served.
_FILES = {
    "app.js": "text/javascript",
    "views.js": "text/javascript",
    "app.css": "text/css",
    "vendor/vis-timeline-graph2d.min.js": "text/javascript",
    "vendor/vis-timeline-graph2d.min.css": "text/css",
    "vendor/chart.umd.min.js": "text/javascript",
}

_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",  # the token is in the URL: never sent on
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


class Gate:
    """ASGI middleware: a request for another host, or a read of /api/ without the token in the
    `X-Fedhpc-Token` header, is refused (403, a typed `{code, message, hint}`: `no_token`,
    `wrong_token` or `forbidden_host`). The page and its static files are public. `url_file`
    is where this run left its URL: the hint names it."""

    def __init__(
        self, app: ASGIApp, *, token: str, port: int, url_file: Path | None = None
    ) -> None:
        self.app, self.token, self.port = app, token, port
        self.hosts = {f"{h}:{port}" for h in ("127.0.0.1", "localhost", "[::1]")}
        also = f" (also in {url_file})" if url_file is not None else ""
        self.hint = f"open the URL this run of `fedhpc ui` printed{also}"

    def refusal(self, request: Request) -> dict[str, str] | None:
        """Why this request is refused, or None when it may go on."""
        if request.headers.get("host", "") not in self.hosts:
            return {
                "code": "forbidden_host",
                "message": "this dashboard answers only for 127.0.0.1, localhost or [::1]",
                "hint": self.hint,
            }
        path = request.url.path
        if path == "/" or path.startswith("/static/"):
            return None  # no data: the page, its script, styles and libraries
        given = request.headers.get("x-fedhpc-token") or ""
        if hmac.compare_digest(given.encode(), self.token.encode()):
            return None
        if not given:
            return {
                "code": "no_token",
                "message": "this dashboard needs its token",
                "hint": self.hint,
            }
        return {
            "code": "wrong_token",
            "message": "this dashboard does not take that token (another run's `fedhpc ui`?)",
            "hint": self.hint,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self.refusal(Request(scope))
        if refused is not None:
            await JSONResponse(refused, status_code=403, headers=_HEADERS)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _Page(BaseModel):
    model_config = ConfigDict(extra="ignore")

    after: int | None = Field(default=None, ge=0, le=2**62)
    limit: int = Field(default=100, ge=1, le=500)
    state: str | None = Field(default=None, max_length=32)


class _TaskPage(BaseModel):
    """A page of the task list (`offset`, at most `limit` tasks), filtered by state and text."""

    model_config = ConfigDict(extra="ignore")

    offset: int = Field(default=0, ge=0, le=10_000_000)
    limit: int = Field(default=TASK_PAGE, ge=1, le=500)
    state: str | None = Field(default=None, max_length=32)
    find: str | None = Field(default=None, max_length=64)


class _GroupsPage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    offset: int = Field(default=0, ge=0, le=10_000_000)


class _GroupPage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    after: str | None = Field(default=None, min_length=1, max_length=128)


def delivery_status(d: dict[str, Any]) -> str:
    """What a person wants to know of a resume: delivered, retrying (failed, will try again),
    dead (gave up), pending (not tried yet) or started (running now)."""
    state = str(d.get("state"))
    if state == "pending" and int(d.get("attempts") or 0) > 0:
        return "retrying"
    return state


Api = Callable[[Request, DaemonClient], Awaitable[Any]]


async def _outlook(request: Request, c: DaemonClient) -> Any:
    """The wait placement predicts now per partition for the reference requests (the daemon's
    own decision, kept until its probes change: no scheduler is asked)."""
    return await c.outlook()


async def _tasks(request: Request, c: DaemonClient) -> Any:
    """A page of the whole task listing, filtered by the daemon (every task, not the newest
    N), with how many match in all."""
    q = _TaskPage.model_validate(dict(request.query_params))
    find = (q.find or "").strip() or None
    return await task_page(c, state=q.state or None, find=find, offset=q.offset, limit=q.limit)


async def _groups(request: Request, c: DaemonClient) -> Any:
    """A page of the groups, newest first, with how many there are in all."""
    q = _GroupsPage.model_validate(dict(request.query_params))
    return await group_summaries(c, offset=q.offset, limit=MAX_GROUPS)


def build_ui_app(
    client: DaemonClient, *, token: str, port: int, url_file: Path | None = None
) -> ASGIApp:
    """The dashboard: pages, static files, and /api/ (reads of the daemon through `client`)."""

    def api(fn: Api) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            try:
                body = await fn(request, client)
            except ValidationError as exc:
                msg = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                body, status = {"code": "bad_request", "message": msg[:500], "hint": ""}, 400
            except Exception as exc:  # the daemon's typed answer (also from a task group)
                typed = typed_error(exc)
                if typed is None:
                    raise
                # The daemon's answer keeps its status: an unknown task is 404 here too.
                body, status = typed.as_dict(), HTTP_STATUS[typed.kind]
            else:
                status = 200
            return JSONResponse(body, status_code=status, headers=_HEADERS)

        return handler

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html", headers=_HEADERS)

    async def static(request: Request) -> Response:
        rel = request.path_params["path"]
        if rel not in _FILES:
            return PlainTextResponse("not found\n", status_code=404, headers=_HEADERS)
        return FileResponse(STATIC / rel, media_type=_FILES[rel], headers=_HEADERS)

    async def health(request: Request, c: DaemonClient) -> Any:
        return await c.health()

    async def federation(request: Request, c: DaemonClient) -> Any:
        return (await c.federation()).model_dump(mode="json")

    async def history(request: Request, c: DaemonClient) -> Any:
        q = _Page.model_validate(dict(request.query_params))
        return await c.history(limit=min(q.limit, 240))

    async def credit(request: Request, c: DaemonClient) -> Any:
        # Credit over time: asked once a minute by the page (each probe is parsed whole).
        q = _Page.model_validate(dict(request.query_params))
        return await c.history(limit=min(q.limit, 240), credit=True)

    async def task_timeline(request: Request, c: DaemonClient) -> Any:
        m = await manifest(c, request.path_params["task_id"])
        return {
            "task": m.model_dump(mode="json"),
            "bars": [bar_json(b) for b in bars([m])],
            # The start its why-pending sentence names in UTC, as data: the page's zone.
            "predicted_start": predicted_start(m),
        }

    async def task_output(request: Request, c: DaemonClient) -> Any:
        # The tail of stdout (and of stderr on failure), read from the site: only when the
        # person asks for it, never by the 3-second poll.
        req = ResultRequest(
            task_id=request.path_params["task_id"], preview="stdout", max_bytes=OUTPUT_TAIL
        )
        m = await c.get_result(req)
        return m.model_dump(
            mode="json", include={"task_id", "preview", "truncated", "stderr", "unreadable"}
        )

    async def group_timeline(request: Request, c: DaemonClient) -> Any:
        # A big group's children a page at a time: `after` is the last child of the page
        # before (the daemon's own paging, `next_after`), checked there like any other id.
        after = _GroupPage.model_validate(dict(request.query_params)).after
        gid = request.path_params["group_id"]
        group, found, omitted = await group_manifests(c, gid, after=after)
        return {
            "group": group.model_dump(mode="json"),
            "bars": [bar_json(b) for b in bars(found)],
            "omitted": omitted,
            "after": after,
            "shown": [m.task_id for m in found],
        }

    async def events(request: Request, c: DaemonClient) -> Any:
        q = _Page.model_validate(dict(request.query_params))
        after = q.after
        if after is None:  # the newest events
            after = max(0, int((await c.health()).get("last_event_seq") or 0) - EVENTS_TAIL)
        return {"events": await c.events(after=after, limit=q.limit)}

    async def deliveries(request: Request, c: DaemonClient) -> Any:
        rows = [d.model_dump(mode="json") for d in await c.deliveries()]
        return {"deliveries": [{**d, "status": delivery_status(d)} for d in rows]}

    async def estimators(request: Request, c: DaemonClient) -> Any:
        body = await c.estimators()
        # The daemon's own judgement: which estimator `auto` uses and its min_samples.
        rows = with_auto(body.get("estimators", []))
        return {
            "estimators": rows,
            "min_samples": body.get("min_samples"),
            "judged": body.get("judged", []),  # each judged job: predicted and realised wait
        }

    routes = [
        Route("/", index),
        Route("/static/{path:path}", static),
        Route("/api/health", api(health)),
        Route("/api/federation", api(federation)),
        Route("/api/history", api(history)),
        Route("/api/credit", api(credit)),
        Route("/api/tasks", api(_tasks)),
        Route("/api/groups", api(_groups)),
        Route("/api/charges", api(charges_route())),
        Route("/api/tasks/{task_id}/timeline", api(task_timeline)),
        Route("/api/tasks/{task_id}/output", api(task_output)),
        Route("/api/groups/{group_id}/timeline", api(group_timeline)),
        Route("/api/events", api(events)),
        Route("/api/deliveries", api(deliveries)),
        Route("/api/estimators", api(estimators)),
        Route("/api/outlook", api(_outlook)),
    ]
    return Gate(Starlette(routes=routes), token=token, port=port, url_file=url_file)
