"""The MCP conformance suite's client command for `fedhpc relay --sign-in`
(test_mcp_conformance_relay): runs the relay against the URL the suite appends and, as the
person's browser, opens every sign-in URL it prints; stops it once it is signed in and has
called the suite's server (which has no `list_events`, so the call fails)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx2


def main() -> int:
    service = sys.argv[-1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = Path(tempfile.mkdtemp(prefix="relay-conformance-"))
    argv = [os.environ["FEDHPC_RELAY_BIN"], "relay", "--service", service, "--sign-in"]
    argv += ["--callback-port", str(port), "--home", str(home / "relay"), "--wait-s", "1"]
    env = {**os.environ, "FEDHPC_HOME": str(home)}
    relay = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    assert relay.stderr is not None
    asked = False
    try:
        for line in relay.stderr:  # the suite's own timeout ends a relay that never gets there
            sys.stderr.write(line)
            if asked and line.strip().startswith("http"):
                page = httpx2.get(line.strip(), follow_redirects=True, timeout=10)
                sys.stderr.write(f"browser: {page.status_code}\n")
            asked = "sign in to" in line
            signed_in = (home / "relay" / "oauth.json").exists()
            if signed_in and "the service call failed" in line:
                return 0
        return 1
    finally:
        relay.terminate()
        relay.wait(timeout=15)


if __name__ == "__main__":
    sys.exit(main())
