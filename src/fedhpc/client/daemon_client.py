"""A client of the daemon's REST API over its Unix socket, shared by the CLI and MCP server."""

from __future__ import annotations

import json
from typing import Any

import anyio

from fedhpc.client.errors import DaemonTimeout, DaemonUnavailable
from fedhpc.client.wire import TIMEOUTS, DaemonWire, RemoteError
from fedhpc.daemon import api
from fedhpc.ops.continuations import ContinuationSpec, DeliveryView, ToolBinding
from fedhpc.ops.data import MoveDataRequest, TransferHandle, TransferRequest, TransferView
from fedhpc.ops.draft import DraftRequest, EnvelopeDraft
from fedhpc.ops.inspect import FederationView, InspectRequest
from fedhpc.ops.scripts import ScriptFile, ScriptFileRequest
from fedhpc.ops.task_views import (
    GroupView,
    ResultManifest,
    SubmitAnswer,
    TaskHandle,
    TaskSummary,
)
from fedhpc.ops.tasks import (
    CancelRequest,
    ReplanRequest,
    ResultRequest,
    SubmitGroupRequest,
    SubmitTaskRequest,
)

__all__ = ["DaemonClient"]


class DaemonClient(DaemonWire):
    """Typed calls to the daemon, one per route of daemon/api.py, over the connection and the
    request rules of `DaemonWire` (client/wire.py). Holds no state beyond that connection."""

    async def __aenter__(self) -> DaemonClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def health(self) -> dict[str, Any]:
        body: dict[str, Any] = await self.call(api.HEALTH, limit_s=TIMEOUTS["health"])
        return body

    @staticmethod
    def _params(req: InspectRequest | None) -> list[tuple[str, str]]:
        if req is None:
            return []
        params = [("site", s) for s in req.sites]
        if req.accelerator:
            params.append(("accelerator", req.accelerator))
        if req.arch:
            params.append(("arch", req.arch.value))
        if req.include_blocked:
            params.append(("include_blocked", "1"))
        return params

    async def estimators(self) -> dict[str, Any]:
        """Each wait estimator's recent error per site and partition (`fedhpc status`)."""
        body: dict[str, Any] = await self.call(api.ESTIMATORS)
        return body

    async def federation(self, req: InspectRequest | None = None) -> FederationView:
        body = await self.call(api.FEDERATION, params=self._params(req))
        return FederationView.model_validate(body)

    async def refresh(self, req: InspectRequest | None = None) -> FederationView:
        body = await self.call(
            api.REFRESH,
            params=self._params(req),
            limit_s=self.settings.probe_timeout_s + TIMEOUTS["read"],
        )
        return FederationView.model_validate(body)

    async def draft_envelope(self, req: DraftRequest) -> EnvelopeDraft:
        body = await self.call(
            api.DRAFT_ENVELOPE, content=req.model_dump_json(), limit_s=TIMEOUTS["draft"]
        )
        return EnvelopeDraft.model_validate(body)

    async def read_script(self, path: str) -> ScriptFile:
        """A job script from the storage root of the site that holds `path`."""
        req = ScriptFileRequest(path=path)
        body = await self.call(
            api.READ_SCRIPT, content=req.model_dump_json(), limit_s=TIMEOUTS["read"]
        )
        return ScriptFile.model_validate(body)

    async def submit_task(self, req: SubmitTaskRequest) -> TaskHandle:
        body = await self.call(
            api.SUBMIT_TASK,
            content=req.model_dump_json(),
            limit_s=TIMEOUTS["submit"],
            effect="submit",
            key=req.idempotency_key,
            what="submit_task",
        )
        return SubmitAnswer.model_validate(body)

    async def submit_group(self, req: SubmitGroupRequest) -> GroupView:
        limit = TIMEOUTS["submit"] + TIMEOUTS["per_child"] * len(req.children)
        body = await self.call(
            api.SUBMIT_GROUP,
            content=req.model_dump_json(),
            limit_s=limit,
            effect="submit",
            key=req.idempotency_key,
            what="submit_group",
        )
        return GroupView.model_validate(body)

    async def group(
        self, group_id: str, *, after: str | None = None, limit: int | None = None
    ) -> GroupView:
        """The group view: counts for all children, one page of children (after `after`)."""
        params: dict[str, Any] = {}
        if after is not None:
            params["after"] = after
        if limit is not None:
            params["limit"] = limit
        body = await self.call(api.GROUP, group_id, params=params or None)
        return GroupView.model_validate(body)

    async def groups(self, limit: int = 20, offset: int = 0) -> list[GroupView]:
        """The newest groups, newest first (the `offset` newest skipped), each with its counts
        over all its children (no child listed)."""
        body = await self.group_page(offset=offset, limit=limit)
        return [GroupView.model_validate(g) for g in body["groups"]]

    async def group_page(self, *, offset: int = 0, limit: int = 20) -> dict[str, Any]:
        """A page of the groups as the daemon answers it (`api.GROUPS`): `groups` (each a
        GroupView's JSON), `offset`, and `total`, how many groups there are in all."""
        body: dict[str, Any] = await self.call(
            api.GROUPS, params={"limit": limit, "offset": offset}
        )
        return body

    async def get_result(self, req: ResultRequest) -> ResultManifest:
        params: dict[str, Any] = {"max_bytes": req.max_bytes}
        if req.preview:
            params["preview"] = req.preview
        if req.brief:
            params["brief"] = "true"
        body = await self.call(api.GET_RESULT, req.task_id, params=params, limit_s=TIMEOUTS["site"])
        return ResultManifest.model_validate(body)

    async def tasks(
        self,
        state: str | None = None,
        limit: int = 100,
        *,
        offset: int | None = None,
        find: str | None = None,
    ) -> list[TaskSummary]:
        """The newest tasks, newest first; with `offset` or `find`, a page of them (as
        `task_page`, without its total)."""
        if offset is not None or find is not None:
            page = await self.task_page(state=state, find=find, offset=offset or 0, limit=limit)
            return [TaskSummary.model_validate(t) for t in page["tasks"]]
        params: dict[str, Any] = {"limit": limit} | ({"state": state} if state else {})
        body = await self.call(api.TASKS, params=params)
        return [TaskSummary.model_validate(t) for t in body["tasks"]]

    async def task_page(
        self,
        *,
        state: str | None = None,
        find: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> dict[str, Any]:
        """A page of the tasks as the daemon answers it (`api.TASKS` with `offset`):
        `tasks` (each a TaskSummary's JSON), newest first, after the first `offset`, filtered
        in SQL (`state`; `find`: text in the id, name or group, or a site an attempt went
        to), `offset`, and `total`, how many tasks match in all."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        params |= {"state": state} if state else {}
        params |= {"find": find} if find else {}
        body: dict[str, Any] = await self.call(api.TASKS, params=params)
        return body

    async def cancel(self, req: CancelRequest) -> TaskHandle:
        body = await self.call(
            api.CANCEL,
            req.task_id,
            limit_s=TIMEOUTS["site"],
            effect="change",
            what="cancel",
        )
        return TaskHandle.model_validate(body)

    async def replan(self, req: ReplanRequest) -> TaskHandle:
        body = await self.call(
            api.REPLAN,
            req.task_id,
            # Only what the caller set: the daemon keeps the task's envelope fields not given.
            content=req.model_dump_json(exclude_unset=True),
            limit_s=TIMEOUTS["replan"],
            effect="change",
            what="replan",
        )
        return TaskHandle.model_validate(body)

    async def archive_events(
        self, older_than_days: float, *, dry_run: bool = False
    ) -> dict[str, Any]:
        """Move delivered events older than `older_than_days` to the daemon's archive."""
        body: dict[str, Any] = await self.call(
            api.ARCHIVE_EVENTS,
            content=json.dumps({"older_than_days": older_than_days, "dry_run": dry_run}),
            effect="change",
            what="archive_events",
        )
        return body

    async def ack_events(self, consumer: str, through: int) -> int:
        """Move `consumer`'s cursor to `through` (a pulled client's acknowledgement)."""
        body = await self.call(
            api.ACK_EVENTS,
            content=json.dumps({"consumer": consumer, "through": through}),
            effect="change",
            what="ack_events",
        )
        return int(body["cursor"])

    async def register_continuation(self, subject: str, spec: ContinuationSpec) -> str:
        payload = json.dumps({"subject": subject, "spec": spec.model_dump(mode="json")})
        body = await self.call(
            api.REGISTER_CONTINUATION, content=payload, effect="change", what="register"
        )
        return str(body["id"])

    async def report_binding(self, binding: ToolBinding) -> None:
        await self.call(api.REPORT_BINDING, content=binding.model_dump_json())

    async def binding(self, tool_use_id: str) -> ToolBinding | None:
        """The session the PreToolUse hook reported for this tool call, or None."""
        try:
            body = await self.call(api.BINDING, tool_use_id)
        except RemoteError as exc:
            if exc.code == "not_found":
                return None
            raise
        return ToolBinding.model_validate(body)

    async def retry_deliveries(
        self, ids: list[str], *, all_dead: bool = False
    ) -> dict[str, list[str]]:
        body = await self.call(
            api.RETRY_DELIVERIES, content=json.dumps({"ids": ids, "all_dead": all_dead})
        )
        return {"retried": list(body["retried"]), "not_dead": list(body["not_dead"])}

    async def deliveries(self, states: tuple[str, ...] = ()) -> list[DeliveryView]:
        body = await self.call(api.DELIVERIES, params=[("state", s) for s in states])
        return [DeliveryView.model_validate(d) for d in body["deliveries"]]

    async def move_data(self, req: MoveDataRequest) -> TransferHandle:
        body = await self.call(
            api.MOVE_DATA,
            content=req.model_dump_json(),
            limit_s=TIMEOUTS["site"],
            effect="submit" if req.idempotency_key else "change",
            key=req.idempotency_key,
            what="move_data",
        )
        return TransferHandle.model_validate(body)

    async def transfer(self, req: TransferRequest) -> TransferView:
        params: dict[str, Any] = {"max_bytes": req.max_bytes} | (
            {"preview": "1"} if req.preview else {}
        )
        body = await self.call(
            api.TRANSFER, req.transfer_id, params=params, limit_s=TIMEOUTS["site"]
        )
        return TransferView.model_validate(body)

    async def events(
        self, after: int = 0, limit: int = 100, consumer: str | None = None, wait_s: float = 0
    ) -> list[dict[str, Any]]:
        """Events after `after` and, with `consumer`, after what it acknowledged; with
        `wait_s`, when there are none yet, the daemon answers as soon as some land (any
        daemon's on one PostgreSQL store), or empty after `wait_s`."""
        params: dict[str, Any] = {"after": after, "limit": limit}
        if consumer is not None:
            params["consumer"] = consumer
        if wait_s > 0:
            params["wait_s"] = wait_s
        body = await self.call(api.EVENTS, params=params, limit_s=TIMEOUTS["read"] + wait_s)
        events: list[dict[str, Any]] = body["events"]
        return events

    async def history(
        self, sites: tuple[str, ...] = (), limit: int = 120, *, credit: bool = False
    ) -> dict[str, Any]:
        """Recent probes per site (pending jobs, free/total GPUs per partition; with `credit`,
        each account's credit instead), oldest first."""
        params = [("site", s) for s in sites] + [("limit", str(limit))]
        if credit:
            params.append(("credit", "true"))
        body: dict[str, Any] = await self.call(api.HISTORY, params=params)
        return body

    async def outlook(self) -> dict[str, Any]:
        """The wait placement predicts now per site and partition for the reference requests
        (1 GPU, 1 node, 4 GPUs), or why a partition cannot run one."""
        body: dict[str, Any] = await self.call(api.OUTLOOK)
        return body

    async def ledger(self) -> dict[str, Any]:
        """Charges per (owner, site, account): used by ended attempts, committed by live ones."""
        body: dict[str, Any] = await self.call(api.LEDGER)
        return body

    async def wait_until_up(self, timeout_s: float = 20.0) -> None:
        with anyio.move_on_after(timeout_s):
            while True:
                try:
                    await self.health()
                except (DaemonUnavailable, DaemonTimeout):  # a killed daemon's connection
                    await anyio.sleep(0.1)
                else:
                    return
        raise DaemonUnavailable(f"the daemon did not come up within {timeout_s:g} s")
