"""Who a task or group belongs to (service mode, issue 34): a mixin of `Store` (store/db.py).

The owner is the caller's stable identity (`issuer|sub`) as the MCP server in service mode
sends it; NULL for everything submitted without one (the single-user default)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from fedhpc.store.reads import Reads

__all__ = ["OwnerReads"]

Table = Literal["tasks", "groups", "transfers"]


class OwnerReads(Reads):
    async def set_owner(self, table: Table, ids: Sequence[str], owner: str) -> None:
        """Record `owner` on rows that have none yet (never moves a row to another owner)."""
        if not ids:
            return
        marks = ",".join("?" * len(ids))
        async with self.transaction() as tx:  # type: ignore[attr-defined]
            await tx.execute(
                f"UPDATE {table} SET owner = ? WHERE owner IS NULL AND id IN ({marks})",  # noqa: S608 (fixed table names)
                (owner, *ids),
            )

    async def owner_of(self, table: Table, row_id: str) -> tuple[bool, str | None]:
        """(the row exists, its owner)."""
        rows = await self._all(f"SELECT owner FROM {table} WHERE id = ?", (row_id,))  # noqa: S608
        if not rows:
            return False, None
        owner = rows[0]["owner"]
        return True, str(owner) if owner is not None else None

    async def set_group_owner(self, group_id: str, owner: str) -> None:
        """Record `owner` on a group and every child of it that has none yet."""
        async with self.transaction() as tx:  # type: ignore[attr-defined]
            await tx.execute(
                "UPDATE groups SET owner = ? WHERE owner IS NULL AND id = ?", (owner, group_id)
            )
            await tx.execute(
                "UPDATE tasks SET owner = ? WHERE owner IS NULL AND group_id = ?",
                (owner, group_id),
            )

    async def owned_attempts(self, owner: str | None, limit: int) -> list[dict[str, Any]]:
        """The newest `limit` attempts, each with its task's owner: `owner`'s only when given
        (the per-person ledger, GET /v1/ledger)."""
        sql = (
            "SELECT t.owner AS owner, a.site AS site, a.partition AS partition, "
            "a.state AS state, a.body AS body FROM attempts a JOIN tasks t ON t.id = a.task_id"
        )
        params: list[Any] = []
        if owner is not None:
            sql += " WHERE t.owner = ?"
            params.append(owner)
        rows = await self._all(sql + " ORDER BY a.updated_at DESC LIMIT ?", [*params, limit])
        return [
            {
                "owner": r["owner"],
                "site": r["site"],
                "partition": r["partition"],
                "state": r["state"],
                "body": json.loads(r["body"]),
            }
            for r in rows
        ]

    async def recent_groups_of(self, owner: str, limit: int) -> list[str]:
        """As `recent_groups`, one owner's."""
        rows = await self._all(
            "SELECT id FROM groups WHERE owner = ? ORDER BY created_at DESC, id DESC LIMIT ?",
            (owner, limit),
        )
        return [str(r["id"]) for r in rows]
