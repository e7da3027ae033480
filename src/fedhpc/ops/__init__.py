"""The operation contract: request and answer models shared by REST, MCP and the CLI."""

from fedhpc.ops.draft import DraftIssue, DraftRequest, EnvelopeDraft, draft_envelope
from fedhpc.ops.inspect import (
    FederationView,
    InspectRequest,
    PartitionView,
    SiteView,
    inspect_federation,
)
from fedhpc.ops.task_views import (
    AttemptView,
    GroupView,
    OutputRef,
    Provenance,
    ResultManifest,
    TaskHandle,
    TaskSummary,
)
from fedhpc.ops.tasks import (
    AdaptationPolicy,
    CancelRequest,
    GroupChild,
    ReplanRequest,
    ResultRequest,
    SubmitGroupRequest,
    SubmitTaskRequest,
)

__all__ = [
    "AdaptationPolicy",
    "AttemptView",
    "CancelRequest",
    "DraftIssue",
    "DraftRequest",
    "EnvelopeDraft",
    "FederationView",
    "GroupChild",
    "GroupView",
    "InspectRequest",
    "OutputRef",
    "PartitionView",
    "Provenance",
    "ReplanRequest",
    "ResultManifest",
    "ResultRequest",
    "SiteView",
    "SubmitGroupRequest",
    "SubmitTaskRequest",
    "TaskHandle",
    "TaskSummary",
    "draft_envelope",
    "inspect_federation",
]
