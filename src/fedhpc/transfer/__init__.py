"""Data movement: logical references, Globus and local backends, the durable transfer service.

The package exports its pure parts only (references, errors, the backend contract), so the
resolver imports no I/O library; import the service from `fedhpc.transfer.service`."""

from fedhpc.transfer.backend import BackendStatus, TransferBackend, TransferSpec
from fedhpc.transfer.errors import (
    BadDataRef,
    NoCollection,
    OutsideRoot,
    PathTraversal,
    TransferAuthError,
    TransferFailed,
    TransferNotFound,
    TransferUnavailable,
    UnknownRoot,
    UnknownSite,
    UnsupportedRoute,
)
from fedhpc.transfer.refs import choose_backend, locate, parse_ref, resolve

__all__ = [
    "BackendStatus",
    "BadDataRef",
    "NoCollection",
    "OutsideRoot",
    "PathTraversal",
    "TransferAuthError",
    "TransferBackend",
    "TransferFailed",
    "TransferNotFound",
    "TransferSpec",
    "TransferUnavailable",
    "UnknownRoot",
    "UnknownSite",
    "UnsupportedRoute",
    "choose_backend",
    "locate",
    "parse_ref",
    "resolve",
]
