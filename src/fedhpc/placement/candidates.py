"""Candidate enumeration: which accounts apply to a (site, partition), in preference order."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from fedhpc.domain.config import Site
from fedhpc.domain.site import PartitionSpec, SiteState

__all__ = ["AccountChoice", "account_choices", "candidate_id"]


@dataclass(frozen=True, slots=True)
class AccountChoice:
    """One account to try on a partition; `rank` orders accounts (user preference tie-break)."""

    name: str | None
    qos: str | None
    rank: int
    from_config: bool


def candidate_id(site: str, partition: str, account: str | None, key: str) -> str:
    """The stable id that ends every tie-break chain."""
    return f"{site}/{partition}/{account or '-'}/{key}"


@lru_cache(maxsize=256)
def _pattern(pattern: str) -> tuple[re.Pattern[str], tuple[str, ...]] | None:
    """A regex for conventions like 'fedhpc-{cpu|gpu}' or '{project}-delta-{cpu|gpu}'."""
    if not pattern or not re.fullmatch(r"[A-Za-z0-9_.+{}|-]+", pattern):
        return None  # free-text conventions are documentation, not a rule
    out, alts = "", tuple[str, ...]()
    for literal, group in re.findall(r"([^{}]*)(?:\{([^{}]*)\})?", pattern):
        out += re.escape(literal)
        if group and "|" in group:
            alts = tuple(group.split("|"))
            out += "(" + "|".join(re.escape(a) for a in alts) + ")"
        elif group:
            out += "[A-Za-z0-9_.+-]+"
    return re.compile(out), alts


def _rank(pattern: str, suffix: str | None, gpu: bool, account: str) -> int:
    """0: fits the site's account convention for this kind of partition; 1: fits it; 2: not."""
    if suffix is not None:
        return 0 if account.endswith(suffix) else 2
    compiled = _pattern(pattern)
    if compiled is None:
        return 1
    regex, alts = compiled
    m = regex.fullmatch(account)
    if m is None:
        return 2
    if not alts or m.lastindex is None:
        return 0
    token = "gpu" if gpu else "cpu"
    return 0 if m.group(m.lastindex) == token else 1


def account_choices(
    site: Site, spec: PartitionSpec, state: SiteState | None
) -> list[AccountChoice]:
    """Accounts from the user's config that cover this partition (by name: the order of the
    config file never changes a decision), else the accounts
    the probe found that fit the site's account convention best (then by name). Empty when none
    applies."""
    configured = site.user.accounts
    if configured:
        covering = sorted(
            (a for a in configured if not a.partitions or spec.name in a.partitions),
            key=lambda a: a.name,
        )
        return [AccountChoice(a.name, a.qos, i, True) for i, a in enumerate(covering)]
    if state is None or not state.accounts:
        return []
    pattern = site.profile.conventions.account_pattern
    gpu = spec.node.accelerator is not None
    return list(_probed(pattern, spec.account_suffix, gpu, state.accounts))


@lru_cache(maxsize=1024)
def _probed(
    pattern: str, suffix: str | None, gpu: bool, accounts: tuple[str, ...]
) -> tuple[AccountChoice, ...]:
    ranks = {a: _rank(pattern, suffix, gpu, a) for a in sorted(accounts)}
    best = min(ranks.values())
    kept = [a for a, r in ranks.items() if r == best]
    return tuple(AccountChoice(a, None, i, False) for i, a in enumerate(kept))
