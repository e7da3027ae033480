"""`python -m fedhpc.service.daemon`: the daemon of `fedhpc service` when people sign in
through the facade. The same lean daemon as `python -m fedhpc.daemon`, plus each person's
upstream tokens from the facade's store (`FacadeTokens`), which sites marked
`identity = "person"` run that person's work with."""

from __future__ import annotations

import sys

sys.modules.setdefault("rich", None)  # type: ignore[arg-type]  # as fedhpc.daemon's

# Imported after blocking rich, on purpose.
from fedhpc.daemon.__main__ import main  # noqa: E402
from fedhpc.service.people import people_from_config  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(people=people_from_config))
