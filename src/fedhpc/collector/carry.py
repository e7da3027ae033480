"""A probe that read the site but not every part of it (`SiteState.unread`: a refused `sshare`,
a timed-out `squeue`, refused billing weights) keeps the last reading of the parts it missed:
one unread part is not an answer of nothing. Without this, a rate-limited `sshare` made the
user's accounts vanish, and a task the site runs every day was told no account was known for
it."""

from __future__ import annotations

from fedhpc.domain import Credit, Health, PartitionState, SiteState

__all__ = ["carry_forward"]

_QUEUE_FIELDS = (
    "pending_jobs",
    "blocked_pending_jobs",
    "running_jobs",
    "user_pending_jobs",
    "user_running_jobs",
)


def carry_forward(before: SiteState | None, state: SiteState) -> SiteState:
    """`state` with its unread parts taken from `before`, the last view (when that view read
    them, or carried them in turn). What is carried stays named unread until a probe reads it."""
    if not state.unread or before is None or before.health is Health.OFFLINE:
        return state
    update: dict[str, object] = {}
    if "accounts" in state.unread:
        update["accounts"] = before.accounts
        update["credit"] = _credit(before, state, keep_balance="balance" in state.unread)
    elif "balance" in state.unread:  # and the accounts only the balances list, with them
        accounts = (*state.accounts, *(a for a in before.accounts if a not in state.accounts))
        old = {c.account: c for c in before.credit}
        read = {c.account for c in state.credit}
        update["accounts"] = accounts
        update["credit"] = tuple(
            c.model_copy(update={"balance": old[c.account].balance})
            if c.balance is None and c.account in old
            else c
            for c in state.credit
        ) + tuple(c for c in before.credit if c.account not in read)
    parts = state.partitions
    if "queue" in state.unread:
        parts = tuple(_queue(before.partition(p.name), p) for p in parts)
    if "billing" in state.unread:
        parts = tuple(_billing(before.partition(p.name), p) for p in parts)
    if parts is not state.partitions:
        update["partitions"] = parts
    return state.model_copy(update=update) if update else state


def _credit(before: SiteState, state: SiteState, *, keep_balance: bool) -> tuple[Credit, ...]:
    """The last usage per account (sshare's), with this probe's balances unless those were
    unread too."""
    now = {c.account: c for c in state.credit}
    out = []
    for last in before.credit:
        fresh = now.pop(last.account, None)
        if fresh is None or keep_balance:
            out.append(last)
        else:
            out.append(last.model_copy(update={"balance": fresh.balance}))
    return (*out, *now.values())


def _queue(old: PartitionState | None, new: PartitionState) -> PartitionState:
    if old is None:
        return new
    return new.model_copy(update={f: getattr(old, f) for f in _QUEUE_FIELDS})


def _billing(old: PartitionState | None, new: PartitionState) -> PartitionState:
    if old is None or old.billing_weights == new.billing_weights:
        return new
    return new.model_copy(update={"billing_weights": old.billing_weights})
