"""Text an agent (or a site, or a job) wrote, made safe to print on a person's terminal.

A submitted objective, a task's reasons, a job's stdout tail or a resume's error can hold
terminal control sequences: an OSC title (ESC ] 0 ; ... BEL), a clear screen (ESC [ 2 J), a
carriage return that overwrites the line, a right-to-left override that reorders it, or a
lone surrogate that stops `print` with UnicodeEncodeError. Printed raw, an agent rewrites the
operator's terminal. Every human-facing view of such text goes through `for_terminal`, which
shows each of those characters as its Python escape (`\\x1b`, `\\u202e`): visible, inert, and
the text around it unchanged. JSON output (`--json`) needs none of this: its encoder escapes
them already."""

from __future__ import annotations

import unicodedata

__all__ = ["for_terminal"]

# Control (C0, DEL, C1), format (bidi overrides and isolates, zero-width characters),
# surrogate, and line/paragraph separators: what can move the cursor, reorder or hide text.
_ESCAPED = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _escape(ch: str) -> str:
    return ch.encode("unicode_escape").decode("ascii")


def for_terminal(text: str, *, lines: bool = False) -> str:
    """`text` with every control, format, surrogate and separator character escaped. With
    `lines`, newlines and tabs are kept (a job's output tail, a multi-line objective); without,
    the text stays on one line (a table cell, a reason)."""
    if text.isprintable():
        return text
    kept = "\n\t" if lines else ""
    return "".join(
        ch
        if ch in kept or ch.isprintable() or unicodedata.category(ch) not in _ESCAPED
        else _escape(ch)
        for ch in text
    )
