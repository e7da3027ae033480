"""The resume MCP server is started off the event loop: the daemon keeps serving meanwhile."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.bridge import warm


async def test_starting_the_resume_server_leaves_the_loop_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_ran = threading.Event()

    def spawn(argv: list[str], **_: Any) -> int:
        # Returns only once a task on the loop has run: spawning on the loop would never.
        if not loop_ran.wait(10):
            raise AssertionError("the loop was held while the server was spawned")
        raise OSError("could not start fedhpc: test")

    monkeypatch.setattr(warm, "spawn_detached", spawn)

    async def on_the_loop() -> None:
        await anyio.sleep(0.05)
        loop_ran.set()

    failed: list[BaseException] = []

    async def start() -> None:
        try:
            await warm.WarmServer(tmp_path)._start()
        except OSError as exc:
            failed.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(on_the_loop)
        tg.start_soon(start)
    assert [str(e) for e in failed] == ["could not start fedhpc: test"]
    assert not (tmp_path / "resume-mcp.json").exists()  # nothing recorded for a failed start
