"""Whose request this is (service mode, issue 34), and the owner scoping of task reads.

The MCP server in service mode sends its verified caller's identity in `X-Fedhpc-Owner`
(`issuer|sub`) and, for a caller holding `fedhpc:admin`, `X-Fedhpc-Admin: 1`. The daemon
trusts these headers because its REST API is only its Unix socket, created 0600 in a 0700
home: whoever can connect already runs as the daemon's own user (the MCP server, the CLI,
the bridge) and could read the store directly. A request without the header (stdio, the
CLI, the dashboard, the bridge) is the single-user default: no owner, everything visible.

A task or group of another owner is answered exactly as one that does not exist
(`not_found`, the same message): a person never learns that someone else's id exists."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from starlette.requests import Request

from fedhpc.ops.tasks import SubmitGroupRequest, SubmitTaskRequest
from fedhpc.orchestrator.book import TaskNotFound
from fedhpc.orchestrator.groups import UNKNOWN_GROUP_HINT
from fedhpc.store import Store
from fedhpc.transfer.errors import TransferNotFound

__all__ = ["ADMIN_HEADER", "OWNER_HEADER", "Principal", "principal"]

S = TypeVar("S", SubmitTaskRequest, SubmitGroupRequest)

OWNER_HEADER = "x-fedhpc-owner"
ADMIN_HEADER = "x-fedhpc-admin"


@dataclass(frozen=True, slots=True)
class Principal:
    owner: str | None  # recorded on what this request submits
    admin: bool

    @property
    def scope(self) -> str | None:
        """The owner reads are limited to; None: every row (no owner, or an admin)."""
        return None if self.admin else self.owner

    async def check(self, store: Store, row_id: str, noun: str = "task") -> None:
        """Refuse `row_id` (a task's, a group's or a transfer's: cancel takes a task or a
        group, get_result says an id is a transfer) when it is another owner's, with the
        answer an unknown id gets."""
        if self.scope is None:
            return
        for table in ("tasks", "groups", "transfers"):
            exists, owner = await store.owner_of(table, row_id)
            if exists and owner != self.scope:
                if noun == "group":
                    raise TaskNotFound(f"no group {row_id!r}", hint=UNKNOWN_GROUP_HINT)
                if noun == "transfer":
                    raise TransferNotFound(f"no transfer {row_id!r}")
                raise TaskNotFound(f"no task {row_id!r}")

    async def check_staged(self, store: Store, transfer_ids: Sequence[str]) -> None:
        """A task may wait for (and run where) the caller's own transfers only: another
        person's is refused as staging refuses an unknown one."""
        if self.scope is None:
            return
        theirs = []
        for tid in transfer_ids:
            exists, owner = await store.owner_of("transfers", tid)
            if exists and owner != self.scope:
                theirs.append(tid)
        if theirs:
            raise TransferNotFound(f"stage_in names unknown transfers: {', '.join(theirs)}")

    def consumer(self, name: str) -> str:
        """The stored name of an event cursor: each person's consumers are their own (the same
        name from two people is two cursors; nobody can move another's)."""
        return name if self.owner is None else f"{self.owner}#{name}"

    def own(self, req: S) -> S:
        """`req` with its retry window scoped to this owner: the same arguments from two
        people within the window are two tasks, never one person's answered to the other."""
        if self.owner is None:
            return req
        return req.model_copy(update={"caller": f"{self.owner}\n{req.caller or ''}"})


def principal(request: Request) -> Principal:
    owner = request.headers.get(OWNER_HEADER) or None
    return Principal(owner=owner, admin=request.headers.get(ADMIN_HEADER) == "1")
