"""The local test federation: four real Slurm clusters on this machine (`fedhpc devfed`)."""

from __future__ import annotations

from fedhpc.errors import ErrorKind, FedError
from fedhpc_dev.devfed.plan import ClusterPlan, FederationPlan, plan_federation

__all__ = ["ClusterPlan", "DevfedError", "FederationPlan", "plan_federation"]


class DevfedError(FedError):
    """The local test federation could not be brought up, checked or stopped."""

    code = "devfed"
    kind = ErrorKind.USAGE
    default_hint = "Read the logs under the devfed folder's log/ directories."
