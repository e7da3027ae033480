"""The daemon's typed REST app (starlette), served on a Unix socket: the route table of
daemon/api.py, each route's handler from its routes_* module, every one under the one guard."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import Route

from fedhpc.daemon import (
    api,
    routes_bridge,
    routes_data,
    routes_events,
    routes_federation,
    routes_history,
    routes_tasks,
)
from fedhpc.daemon.guard import guard
from fedhpc.daemon.state import DaemonState

__all__ = ["build_app"]

_MODULES = (
    routes_bridge,
    routes_data,
    routes_events,
    routes_federation,
    routes_history,
    routes_tasks,
)


def build_app(state: DaemonState) -> Starlette:
    """The app serving every route of `api.ROUTES`, in its order, and nothing else."""
    handlers = {e: h for m in _MODULES for e, h in m.handlers(state).items()}
    missing = [e.name for e in api.ROUTES if e not in handlers]
    extra = [e.name for e in handlers if e not in api.ROUTES]
    if missing or extra:
        raise RuntimeError(f"route table and handlers differ: missing {missing}, extra {extra}")
    routes = [
        Route(
            e.path,
            guard(handlers[e], state.request_times, f"{e.method} {e.path}"),
            methods=[e.method],
            name=e.name,
        )
        for e in api.ROUTES
    ]
    return Starlette(routes=routes)
