"""Transports: the one async seam (`run(Command) -> CommandResult`) between fedhpc and a site."""

from __future__ import annotations

from pathlib import Path

from fedhpc.adapters.transports.base import Transport, TransportError, TransportUnavailable
from fedhpc.adapters.transports.globus_compute import (
    CommandTooLarge,
    GlobusComputeTransport,
    RemoteTaskFailed,
)
from fedhpc.adapters.transports.local import LocalTransport, OutputTooLarge, TransportTimeout
from fedhpc.adapters.transports.ssh import SshTransport
from fedhpc.domain.site import TransportSpec

__all__ = [
    "CommandTooLarge",
    "GlobusComputeTransport",
    "LocalTransport",
    "OutputTooLarge",
    "RemoteTaskFailed",
    "SshTransport",
    "Transport",
    "TransportError",
    "TransportTimeout",
    "TransportUnavailable",
    "make_transport",
]


def make_transport(
    spec: TransportSpec, *, state_dir: Path, name: str | None = None, per_person: bool = False
) -> Transport:
    """The transport a site's profile asks for. The Globus Compute SDK loads only when used.
    `per_person` (`identity = "person"`): each person's commands run with their own
    authorization, which only a Globus Compute endpoint can take."""
    if per_person and spec.kind != "globus-compute":
        raise TransportUnavailable(
            f'identity = "person" needs a globus-compute transport, not {spec.kind}',
            hint='Remove identity = "person" from the site, or reach it through a Globus '
            "Compute endpoint (an SSH site runs under the identity the operator configures).",
        )
    if spec.kind == "local":
        return LocalTransport(spec, name=name or "local")
    if spec.kind == "ssh":
        return SshTransport(spec, state_dir=state_dir, name=name)
    if spec.kind == "globus-compute":
        return GlobusComputeTransport(spec, state_dir=state_dir, name=name, per_person=per_person)
    raise TransportUnavailable(
        f"unknown transport kind {spec.kind!r}", hint="Use local, ssh or globus-compute."
    )
