"""The offline Globus world the transfer tests share: two shipped centers with one collection
each, a TransferClient that never retries on its own (the daemon's cycle is the retry), and the
`responses` mock that `globus_sdk.testing`'s registered responses answer through.

A test module that imports `mocked_http` gets it as an autouse fixture."""

from __future__ import annotations

from collections.abc import Iterator

import globus_sdk
import pytest
import responses
from globus_sdk.testing import RegisteredResponse, load_response
from globus_sdk.transport import RetryConfig

from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.profiles import load_profiles
from fedhpc.transfer.globus import GlobusBackend

__all__ = [
    "DST",
    "SRC",
    "TASK",
    "globus_backend",
    "globus_client",
    "globus_sites",
    "mocked_http",
    "submit_answer",
    "submit_refused",
    "task_status",
    "transfer_accepted",
]

SRC = "6f1e3c2a-0000-4000-8000-00000000d001"  # delta's `work` collection
DST = "6f1e3c2a-0000-4000-8000-00000000e001"  # polaris's `eagle` collection
TASK = "42c9f5e2-1111-4000-8000-00000000aaaa"  # the Globus task id the mock hands out


@pytest.fixture(autouse=True)
def mocked_http() -> Iterator[None]:
    responses.start()
    yield
    responses.stop()
    responses.reset()


def globus_sites() -> dict[str, Site]:
    p = load_profiles()
    return {
        "delta": Site(p["delta"], UserSiteConfig(collections={"work": SRC})),
        "polaris": Site(p["polaris"], UserSiteConfig(collections={"eagle": DST})),
    }


def globus_client() -> globus_sdk.TransferClient:
    # No SDK retries: the daemon's own cycle is the retry (with the same submission id).
    return globus_sdk.TransferClient(
        authorizer=globus_sdk.AccessTokenAuthorizer("dummy-token"),
        retry_config=RetryConfig(max_retries=0),
    )


def globus_backend() -> GlobusBackend:
    return GlobusBackend(globus_client)


def transfer_accepted() -> str:
    """Globus hands out a submission id, then accepts the transfer submitted under it as task
    TASK; the submission id."""
    sid = str(load_response(globus_sdk.TransferClient.get_submission_id).metadata["submission_id"])
    submit_answer(sid)
    return sid


def submit_answer(sid: str, code: str = "Accepted") -> None:
    """Globus answers the next transfer submitted under `sid` with `code`, naming task TASK
    ("Duplicate": one submitted under it before)."""
    load_response(
        RegisteredResponse(
            service="transfer",
            method="POST",
            path="/v0.10/transfer",
            json={"code": code, "task_id": TASK, "submission_id": sid},
        )
    )


def submit_refused(status: int, **body: object) -> None:
    """Globus hands out a submission id, then refuses the transfer submitted under it with
    HTTP `status` and `body` (its `code`, `message`...)."""
    load_response(globus_sdk.TransferClient.get_submission_id)
    load_response(
        RegisteredResponse(
            service="transfer", method="POST", path="/v0.10/transfer", status=status, json=body
        )
    )


def task_status(status: str, **extra: object) -> None:
    """Globus answers the next poll of task TASK: `status`, with `extra` fields."""
    load_response(
        RegisteredResponse(
            service="transfer",
            method="GET",
            path=f"/v0.10/task/{TASK}",
            json={"task_id": TASK, "status": status, **extra},
        )
    )
