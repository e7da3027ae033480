"""What the Globus tests read back from the mocked HTTP (`globus_sdk.testing` answers through
`responses`): the last request made and a request's JSON body, typed."""

from __future__ import annotations

import json
from typing import Any

from globus_sdk.testing import get_last_request
from requests import PreparedRequest

__all__ = ["json_body", "last_request"]


def last_request() -> PreparedRequest:
    """The last request the mock answered; a test that reads it made one."""
    request = get_last_request()
    assert request is not None, "no request reached the mocked Globus services"
    return request


def json_body(request: PreparedRequest) -> Any:
    """A request's JSON body (the SDK sends JSON as text or bytes, never a stream)."""
    assert isinstance(request.body, str | bytes), request.body
    return json.loads(request.body)
