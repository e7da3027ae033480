"""The one guard every REST handler runs under (daemon/app.py applies it when it mounts the
route table): every failure leaves as a typed `{code, message, hint}` with its class's status."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import structlog
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from fedhpc.daemon.timings import RequestTimes
from fedhpc.errors import HTTP_STATUS, FedError, FieldIssue, ValidationFailed, typed_error
from fedhpc.ops.suggest import fields_named, request_model, unknown_field_reason
from fedhpc.store import quick_reads

__all__ = ["Handler", "guard", "model_response", "status_of", "validation_issues"]

log = structlog.get_logger(__name__)

Handler = Callable[[Request], Awaitable[Response]]


def model_response(model: BaseModel, status: int = 200) -> Response:
    """A model as the JSON answer (its own serialisation, aliases and all)."""
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


def status_of(exc: FedError) -> int:
    """The HTTP status of a typed error: its class decides, never its code string."""
    return HTTP_STATUS[exc.kind]


def _error(exc: FedError) -> JSONResponse:
    return JSONResponse(exc.as_dict(), status_code=status_of(exc))


def validation_issues(exc: ValidationError) -> list[FieldIssue]:
    """Pydantic's errors as field-named issues, without its "Value error, " prefix. A check
    across the whole body (a model validator: no field in its location) is named by the
    fields its message names when there are any, else "(body)" with a reason that says so."""
    root = request_model(exc.title)
    issues = []
    for e in exc.errors(include_url=False, include_input=False):
        loc = tuple(e["loc"])
        msg = str(e["msg"]).removeprefix("Value error, ")[:500]
        if e["type"] == "extra_forbidden":
            issues.append(FieldIssue(".".join(map(str, loc)), unknown_field_reason(root, loc)))
        elif loc:
            issues.append(FieldIssue(".".join(map(str, loc)), msg))
        elif named := fields_named(root, msg):
            issues.extend(FieldIssue(name, msg) for name in named)
        else:
            issues.append(FieldIssue("(body)", f"the {exc.title} body as a whole: {msg}"))
    return issues


class _Internal(FedError):
    code = "internal"
    default_hint = "This is a fedhpc bug: retry once, then report it with the daemon's log."


def guard(fn: Handler, times: RequestTimes | None = None, route: str = "") -> Handler:
    """Every failure leaves as {code, message, hint} with the status of its class; validation
    errors name the field; anything untyped is logged and answered as `internal` (500). The
    store's reads while answering are quick reads (store/reads.py): never behind a write.
    How long each answer took goes back in its `Server-Timing` header (`app;dur=<ms>`) and,
    with `times`, is kept there under `route`."""

    async def wrapped(request: Request) -> Response:
        started = time.perf_counter()
        response = await _answer(request)
        ms = (time.perf_counter() - started) * 1000
        response.headers["Server-Timing"] = f"app;dur={ms:.1f}"
        if times is not None:
            times.add(route, ms)
        return response

    async def _answer(request: Request) -> Response:
        try:
            with quick_reads():
                return await fn(request)
        except ClientDisconnect:  # the caller left mid-request: routine, and no one to answer
            log.info("client disconnected", path=request.url.path)
            return Response(status_code=400)
        except ValidationError as exc:
            return _error(ValidationFailed(validation_issues(exc)))
        except FedError as exc:
            return _error(exc)
        except Exception as exc:  # a bug: the caller gets a typed answer, the log the details
            if typed := typed_error(exc):  # raised inside a task group
                return _error(typed)
            log.exception("request failed", path=request.url.path, error=repr(exc)[:500])
            return _error(_Internal(f"the daemon failed on {request.url.path}"))

    return wrapped
