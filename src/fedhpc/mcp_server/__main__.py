"""`python -m fedhpc.mcp_server [--http ...]`: the same as `fedhpc serve`."""

import sys

from fedhpc.cli.serve import main

sys.exit(main(sys.argv[1:]))
