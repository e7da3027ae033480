"""The operation contract: request and answer models shared by REST, MCP and the CLI."""

from fedhpc.ops.inspect import (
    FederationView,
    InspectRequest,
    PartitionView,
    SiteView,
    inspect_federation,
)

__all__ = ["FederationView", "InspectRequest", "PartitionView", "SiteView", "inspect_federation"]
