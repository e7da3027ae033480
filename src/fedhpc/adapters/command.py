"""The unit every transport runs: an argv (never a shell string), optional stdin, and its result."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

__all__ = [
    "BATCH_MARK",
    "BatchSection",
    "Command",
    "CommandResult",
    "batch",
    "iter_lines",
    "quote",
    "shell_line",
    "split_batch",
]


# C0 controls, DEL, and the characters Python's splitlines() treats as line breaks.
_CONTROL = set(range(32)) | {0x7F, 0x85, 0x2028, 0x2029}


def quote(value: str) -> str:
    """The one quoting helper: every value that reaches a shell goes through here.

    Plain text gets POSIX single quotes. Text with control characters (newline, CR, ESC...)
    gets bash/zsh/ksh ANSI-C quoting ($'...') so that no line of a script or command line ever
    starts with text we did not write: a quoted newline followed by '#SBATCH' stays one line.
    """
    if not any(ord(ch) in _CONTROL for ch in value):
        return shlex.quote(value)
    out = []
    for ch in value:
        code = ord(ch)
        if ch in "\\'":
            out.append("\\" + ch)
        elif code in _CONTROL and code > 0x7F:
            out.append(f"\\u{code:04x}")
        elif code in _CONTROL:
            out.append(f"\\x{code:02x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def shell_line(argv: Iterable[str]) -> str:
    """A shell command line that the shell parses back into exactly `argv`."""
    return " ".join(quote(a) for a in argv)


@dataclass(frozen=True, slots=True)
class Command:
    """What to run at a site. `argv[0]` is looked up on the site's PATH; nothing is re-parsed."""

    argv: tuple[str, ...]
    stdin: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 60.0
    idempotent: bool = True  # only idempotent commands are retried by transports
    # Scheduler commands this one remote call runs (a batched probe, a ping gate, a batched
    # submission): what a site's cap on commands per minute counts (`adapters.pace`).
    commands: int = 1

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("a command needs at least one argv element")
        if self.commands < 1:
            raise ValueError("a command runs at least one command")
        for arg in self.argv:
            if "\x00" in arg:
                raise ValueError("argv elements cannot contain NUL")

    def as_shell(self) -> str:
        """The command as one shell line with environment assignments, for remote transports."""
        assigns = [f"{k}={quote(v)}" for k, v in sorted(self.env.items())]
        return " ".join([*assigns, shell_line(self.argv)]) if assigns else shell_line(self.argv)


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What came back: exit status and both streams, decoded as UTF-8 with replacement."""

    returncode: int
    stdout: str
    stderr: str
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0


BATCH_MARK = "@@fedhpc-section"
STDERR_MARK = "@@fedhpc-stderr"
STDERR_LINES = 20  # of each section's stderr, kept apart from its output (why it failed)


@dataclass(frozen=True, slots=True)
class BatchSection:
    """The output of one command inside a batched script."""

    name: str
    returncode: int
    stdout: str
    stderr: str = ""  # its first STDERR_LINES lines: a refusal's words (`busy`), warnings


def batch(sections: Mapping[str, Command], *, timeout_s: float = 60.0) -> Command:
    """Many commands as one remote call: a bash script on stdin, each section fenced by markers.

    Section names are ours (fixed identifiers); every argv element is quoted.
    """
    lines = ["set +e"]
    for name, cmd in sections.items():
        if not name.replace("_", "").isalnum():
            raise ValueError(f"section name {name!r} must be an identifier")
        lines.append(f"echo '{BATCH_MARK} begin {name}'")
        # stdout straight through; stderr marked, after it (sed flushes once the command
        # ends), so a parser never sees it and a refusal's words are not lost.
        lines.append(
            f"{{ {cmd.as_shell()} 2>&1 1>&3 3>&- | "
            f"sed -n '1,{STDERR_LINES}s/^/{STDERR_MARK} /p'; _rc=${{PIPESTATUS[0]}}; }} 3>&1"
        )
        lines.append(f'echo "{BATCH_MARK} end {name} $_rc"')
    return Command(
        argv=("bash", "-s"),
        stdin="\n".join(lines) + "\n",
        timeout_s=timeout_s,
        commands=sum(c.commands for c in sections.values()) or 1,
    )


def split_batch(stdout: str) -> dict[str, BatchSection]:
    """Cut a batched script's output back into its sections."""
    out: dict[str, BatchSection] = {}
    current: str | None = None
    buf: list[str] = []
    err: list[str] = []
    for line in stdout.splitlines():
        if line.startswith(BATCH_MARK + " begin "):
            current, buf, err = line.split()[-1], [], []
        elif line.startswith(BATCH_MARK + " end ") and current is not None:
            parts = line.split()
            rc = int(parts[-1]) if parts[-1].lstrip("-").isdigit() else -1
            text = "\n".join(buf) + ("\n" if buf else "")
            out[current] = BatchSection(current, rc, text, "".join(f"{e}\n" for e in err))
            current = None
        elif current is not None and line.startswith(STDERR_MARK + " "):
            err.append(line[len(STDERR_MARK) + 1 :])
        elif current is not None:
            buf.append(line)
    return out


def iter_lines(text: str) -> Iterator[str]:
    """`text`'s lines one at a time, without a list (or copy) of them all (a long accounting
    read or output file is walked, never held twice)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        yield text[start:end]
        start = end + 1
