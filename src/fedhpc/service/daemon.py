"""`python -m fedhpc.service.daemon`: the daemon of `fedhpc service` when people sign in
through the facade. The same lean daemon as `python -m fedhpc.daemon`, plus each person's
upstream tokens from the facade's store (`FacadeTokens`), which sites marked
`identity = "person"` run that person's work with."""

from __future__ import annotations

import sys

sys.modules.setdefault("rich", None)  # type: ignore[arg-type]  # as fedhpc.daemon's

# Imported after blocking rich, on purpose.
from fedhpc.daemon.__main__ import main  # noqa: E402
from fedhpc.profiles.loader import load_user_config, user_config_path  # noqa: E402
from fedhpc.service.people import FacadeTokens, facade_tokens  # noqa: E402
from fedhpc.settings import fedhpc_home  # noqa: E402

__all__ = ["people_from_config"]


def people_from_config() -> FacadeTokens | None:
    """The facade's tokens when the user config has `[service.facade]`, else None."""
    service = load_user_config(user_config_path()).service
    if service is None or service.facade is None:
        return None
    return facade_tokens(service, fedhpc_home())


if __name__ == "__main__":
    sys.exit(main(people=people_from_config))
