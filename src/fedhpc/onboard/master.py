"""The SSH ControlMaster of `fedhpc connect`: opened in the person's terminal (the one
password/MFA prompt they answer), and its pid and opening time noted for `fedhpc doctor`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable

from fedhpc.adapters.transports.ssh import SshTransport
from fedhpc.domain.site import TransportSpec
from fedhpc.errors import UsageError
from fedhpc.onboard.doctor import connect_record
from fedhpc.settings import fedhpc_home

__all__ = ["open_master"]


def open_master(spec: TransportSpec, name: str, say: Callable[[str], None] = print) -> None:
    """ssh -fN with ControlMaster in the foreground terminal: the person answers the prompts."""
    transport = SshTransport(spec, state_dir=fedhpc_home(), name=name)
    check = subprocess.run(transport.control_argv("check"), capture_output=True, check=False)
    if check.returncode == 0:
        say(f"{name}: a ControlMaster is already open; reusing it")
        return
    argv = transport.open_argv()
    say(f"{name}: opening the SSH session (answer the password/MFA prompts): {' '.join(argv)}")
    sys.stdout.flush()
    done = subprocess.run(argv, check=False)  # inherits this terminal: prompts reach the person
    if done.returncode != 0:
        raise UsageError(
            f"ssh to {transport.destination} failed (exit {done.returncode})",
            hint="Check the host and user, and that `ssh HOST` works in this terminal; "
            "ssh's own message above says why (a name that does not resolve, a host key "
            "that changed or was not accepted, a refused login).",
        )
    _record(transport, name)
    say(f"{name}: session open; fedhpc's calls ride on it until the center ends it")


def _record(transport: SshTransport, name: str) -> None:
    """Note the master's pid and opening time, so `fedhpc doctor` can say when it closes."""
    check = subprocess.run(
        transport.control_argv("check"), capture_output=True, text=True, check=False
    )
    found = re.search(r"pid=(\d+)", check.stderr + check.stdout)
    if not found:
        return
    path = connect_record(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": int(found.group(1)), "at": int(time.time())}))
