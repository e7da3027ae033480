"""`python -m fedhpc.daemon`: the daemon in a lean process.

structlog imports `rich` when it is installed (it is: `mcp` depends on it), which costs the
daemon about 5 MB of RSS for console rendering it never uses; the daemon logs key-value lines.
Blocking the import before anything loads keeps the daemon under its memory budget.
"""

from __future__ import annotations

import sys

sys.modules.setdefault("rich", None)  # type: ignore[arg-type]


def main() -> int:
    from fedhpc.cli.main import main as cli

    return cli(["daemon", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
