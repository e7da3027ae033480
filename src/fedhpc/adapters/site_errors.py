"""The site adapter's own errors: a command that failed, folders that could not be made, storage
roots not read yet."""

from __future__ import annotations

from fedhpc.errors import PermanentError, TransientError

__all__ = ["CommandFailed", "StorageUnread", "WorkdirFailed"]


class CommandFailed(PermanentError):
    """A scheduler command ran but failed (non-zero exit) where failure is not a normal answer."""

    code = "command_failed"


class WorkdirFailed(PermanentError):
    """The job's folders could not be created: no scheduler ever saw the job."""

    code = "workdir_failed"
    PREFIX = "cannot create the job's folder"


class StorageUnread(TransientError):
    """A `$NAME` storage root could not be read from the site's login shell yet (the site did not
    answer that call): nothing was created; another site, or a later try, may do."""

    code = "storage_unread"
    PREFIX = "cannot read the storage roots"
    default_hint = "fedhpc reads them again with the next probe; `fedhpc doctor SITE` shows why."
