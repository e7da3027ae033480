"""The CLI's plain-text tables: columns padded to their widest cell."""

from __future__ import annotations

from collections.abc import Sequence

from fedhpc.terminal import for_terminal

__all__ = ["table_lines"]


def table_lines(rows: Sequence[Sequence[str]]) -> list[str]:
    """One line per row, columns two spaces apart and padded to their widest cell, no trailing
    blanks; the first row is the header. A cell's control characters are shown escaped
    (`fedhpc.terminal`): a name or an error a site or an agent wrote never moves the cursor."""
    rows = [[for_terminal(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
