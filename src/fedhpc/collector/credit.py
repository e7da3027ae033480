"""The credit scope: the user's budgets from their config joined with live usage and balance."""

from __future__ import annotations

from fedhpc.domain.config import Site
from fedhpc.domain.site import Credit, SiteState

__all__ = ["with_budgets"]


def with_budgets(state: SiteState, site: Site) -> SiteState:
    """Each configured account gets its budget (its own, else the site's); live usage and
    balance from the probe are kept. Accounts only the site knows keep the site budget."""
    live = {c.account: c for c in state.credit}
    unit = site.profile.charge.unit
    out: list[Credit] = []
    for acct in site.user.accounts:
        seen = live.pop(acct.name, None)
        out.append(
            Credit(
                account=acct.name,
                budget=acct.budget if acct.budget is not None else site.user.budget,
                used=seen.used if seen else None,
                balance=seen.balance if seen else None,
                unusable=seen.unusable if seen else None,
                unit=unit,
            )
        )
    for name in sorted(live):
        c = live[name]
        out.append(c.model_copy(update={"budget": site.user.budget, "unit": unit}))
    return state.model_copy(update={"credit": tuple(out)})
