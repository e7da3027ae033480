"""Reading files at a site (sizes, a head, a tail), for the site adapter: one remote call each."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fedhpc.adapters.command import Command, CommandResult
from fedhpc.adapters.site_errors import CommandFailed

__all__ = ["RemoteFiles"]


class RemoteFiles:
    """File reads of `SiteAdapter` (a mixin: `_run` and `name` are the adapter's)."""

    if TYPE_CHECKING:

        @property
        def name(self) -> str: ...

        async def _run(self, command: Command, kind: str) -> CommandResult: ...

    async def file_sizes(self, paths: Sequence[str]) -> dict[str, int | None]:
        """Sizes of files at the site in one call; None for a file that is not there."""
        if not paths:
            return {}
        script = 'for f in "$@"; do s=$(stat -c %s -- "$f" 2>/dev/null) || s=-; echo "$s"; done'
        result = await self._run(Command(("bash", "-c", script, "fedhpc", *paths)), "files")
        sizes = result.stdout.split()
        return {p: (int(s) if s.isdigit() else None) for p, s in zip(paths, sizes, strict=False)}

    async def head(self, path: str, max_bytes: int) -> tuple[str, bool]:
        """At most `max_bytes` of a file (decoded with replacement) and whether it was cut."""
        result = await self._run(
            Command(("head", "-c", str(max_bytes + 1), "--", path), timeout_s=30.0), "files"
        )
        if not result.ok:
            raise CommandFailed(f"cannot read {path} on {self.name}: {result.stderr.strip()}")
        text = result.stdout
        return text[:max_bytes], len(text) > max_bytes

    async def tail(self, path: str, max_bytes: int) -> tuple[str, bool]:
        """The last `max_bytes` of a file (where a failing job's error is), decoded with
        replacement, and whether earlier bytes were left out."""
        script = 'wc -c < "$2"; tail -c "$1" -- "$2"'
        result = await self._run(
            Command(("bash", "-c", script, "fedhpc", str(max_bytes), path), timeout_s=30.0),
            "files",
        )
        if not result.ok:
            raise CommandFailed(f"cannot read {path} on {self.name}: {result.stderr.strip()}")
        size, _, text = result.stdout.partition("\n")
        cut = size.strip().isdigit() and int(size) > max_bytes
        return text, bool(cut)
