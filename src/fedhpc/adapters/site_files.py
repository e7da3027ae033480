"""Reading files at a site (sizes, a head, a tail), for the site adapter: one remote call each."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fedhpc.adapters.command import Command, CommandResult
from fedhpc.adapters.site_errors import CommandFailed

__all__ = ["RemoteFiles"]

_CLEAR_AT_ONCE = 300  # elements per call: 3 paths each, well under the argument limit
# Per element (3 arguments): the scheduler's stderr, when not empty, appended to the element's
# own; then both scheduler files removed. A missing file or folder is no error.
_CLEAR = (
    'while [ "$#" -ge 3 ]; do '
    '{ [ -s "$2" ] && [ -n "$3" ] && cat -- "$2" >>"$3"; } 2>/dev/null; '
    'rm -f -- "$1" "$2"; shift 3; done'
)


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

    async def clear_array_outputs(self, leftovers: Sequence[tuple[str, str, str | None]]) -> None:
        """Remove the files a scheduler wrote for ended array elements (`(stdout, stderr,
        element's own stderr)`: `ArrayDialect.array_outputs`), after appending what its stderr
        holds (a time limit's or a cancel's words) to the element's own, which `get_result`
        reads; one remote call per `_CLEAR_AT_ONCE` elements. Only files fedhpc named."""
        for at in range(0, len(leftovers), _CLEAR_AT_ONCE):
            argv = [p or "" for trio in leftovers[at : at + _CLEAR_AT_ONCE] for p in trio]
            await self._run(
                Command(("bash", "-c", _CLEAR, "fedhpc", *argv), timeout_s=60.0), "files"
            )
