"""Pieces every dialect shares: the script body after the directives, and directive guards."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from fedhpc.adapters.command import Command, CommandResult, quote, shell_line, split_batch
from fedhpc.domain.job import ArraySpec, JobSpec
from fedhpc.domain.site import SiteProfile

__all__ = [
    "array_script",
    "check_names",
    "directive",
    "error_text",
    "extra_directives",
    "io_directives",
    "parse_found",
    "parse_name_pairs",
    "render_body",
    "with_balance",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_names(names: Sequence[str]) -> list[str]:
    """Job names for a lookup: only the conservative job-name charset passes."""
    bad = [n for n in names if not _NAME.match(n)]
    if bad:
        raise ValueError(f"not job names: {bad!r}")
    return list(names)


def error_text(result: CommandResult, *, last_line_only: bool) -> str:
    """A failed command's own words (stderr, else stdout), else its exit status.

    `last_line_only`: Slurm's commands (and localsched, which mimics them) print warnings
    before the one line that says what failed; qsub and bsub may spread their reason over
    several lines, so the PBS and LSF dialects keep all of it."""
    text = (result.stderr or result.stdout).strip()
    if not text:
        return f"exit status {result.returncode}"
    return text.splitlines()[-1] if last_line_only else text


def with_balance(
    sections: dict[str, Command], profile: SiteProfile, env: Mapping[str, str] | None = None
) -> dict[str, Command]:
    """A dialect's probe sections plus the site's balance command, when its profile has one."""
    if profile.conventions.balance_command:
        sections["balance"] = Command(profile.conventions.balance_command, env=env or {})
    return sections


def parse_found(result: CommandResult) -> dict[str, str]:
    """A batched per-name lookup's output ('<job id> <name>' lines per section) -> name: id."""
    found: dict[str, str] = {}
    for section in split_batch(result.stdout).values():
        for name, job in parse_name_pairs(section.stdout).items():
            found.setdefault(name, job)
    return found


def parse_name_pairs(text: str, sep: str | None = None) -> dict[str, str]:
    """'<job id><sep><name>' lines -> {name: job id}; the first id seen per name wins."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split(sep, 1)
        if len(parts) == 2 and parts[0].strip() and parts[1].strip():
            out.setdefault(parts[1].strip(), parts[0].strip())
    return out


# A directive value may hold only these characters: no whitespace, quotes, '#', '$', '`', ';'
# or line breaks. JobSpec's validators already enforce this; this is the last line of defence.
# '&' and '|' appear in Slurm constraint expressions; directives are parsed by the scheduler,
# never by a shell, so they are safe there.
_DIRECTIVE_VALUE = re.compile(r"^[A-Za-z0-9_./%~+@=,:&|\-\[\]]*$")


def directive(prefix: str, flag: str, value: str | int | None = None, *, sep: str = "=") -> str:
    """One directive line such as '#SBATCH --time=00:10:00'; refuses anything unsafe."""
    if value is None:
        return f"{prefix} {flag}"
    text = str(value)
    if not _DIRECTIVE_VALUE.match(text) or text.startswith("-"):
        raise ValueError(f"unsafe value for {flag}: {text!r}")
    return f"{prefix} {flag}{sep}{text}"


def io_directives(prefix: str, spec: JobSpec) -> list[str]:
    """The --output, --error and --chdir lines of Slurm (and of localsched, which mimics it)."""
    lines = []
    if spec.stdout:
        lines.append(directive(prefix, "--output", spec.stdout))
    if spec.stderr:
        lines.append(directive(prefix, "--error", spec.stderr))
    if spec.workdir:
        lines.append(directive(prefix, "--chdir", spec.workdir))
    return lines


def extra_directives(prefix: str, profile: SiteProfile) -> list[str]:
    """The profile's fixed directives (validated when the profile loaded), re-checked here."""
    out = []
    for text in profile.conventions.extra_directives:
        if text.startswith("--") and "=" in text:
            flag, value = text.split("=", 1)
            out.append(directive(prefix, flag, value))
        elif " " in text:
            flag, value = text.split(" ", 1)
            out.append(directive(prefix, flag, value, sep=" "))
        else:
            out.append(directive(prefix, text))
    return out


STRICT = "set -euo pipefail"  # a batch script's first command, after its directives


def render_body(
    spec: JobSpec, profile: SiteProfile, *, workdir_var: str | None = None
) -> list[str]:
    """The shell part of a batch script: strict mode, prologue, env, cd, then the quoted argv.

    `workdir_var` names the scheduler's submit-dir variable for dialects without a working
    directory directive (PBS: PBS_O_WORKDIR); Slurm and LSF set it with a directive.
    """
    lines = [STRICT]
    lines.extend(profile.conventions.prologue)  # fixed by the profile author, never by an agent
    for name, value in sorted(spec.env.items()):
        lines.append(f"export {name}={quote(value)}")
    if spec.workdir is not None:
        lines.append(f"cd {quote(spec.workdir)}")
    elif workdir_var is not None:
        lines.append(f'cd "${{{workdir_var}:-$HOME}}"')
    argv = list(spec.command)
    if spec.container_image is not None:
        tpl = profile.containers.exec_template
        gpu_flag = profile.containers.gpu_flag if spec.shape.gpus > 0 else ""
        wrapper = tpl.format(gpu_flag="\x00GPU\x00", image="\x00IMG\x00").split()
        prefix: list[str] = []
        for word in wrapper:
            if word == "\x00GPU\x00":
                prefix.extend(gpu_flag.split())
            elif word == "\x00IMG\x00":
                prefix.append(spec.container_image)
            else:
                prefix.append(word)
        argv = prefix + argv
    lines.append(shell_line(argv))
    return lines


def array_script(
    render: Callable[[JobSpec, SiteProfile], str],
    members: Sequence[JobSpec],
    profile: SiteProfile,
    *,
    name: str,
    throttle: int | None,
    stdout: str,
    stderr: str,
    index_var: str,
    first: int = 0,
) -> str:
    """A whole array script: the first member's script, rendered by the dialect's `render`
    as the array's (named `name`, no folder of its own, the scheduler's own output at
    `stdout`/`stderr`, elements first..first+N-1, at most `throttle` at once) without its
    argv line, then `array_body`. `first` is the scheduler's first index: 0 on Slurm and PBS,
    1 on LSF (bsub -J 'name[1-N]' accepts no index 0)."""
    head = members[0].model_copy(
        update={
            "name": name,
            "workdir": None,
            "stdout": stdout,
            "stderr": stderr,
            "array": ArraySpec(start=first, stop=first + len(members) - 1, limit=throttle),
        }
    )
    lines = render(head, profile).splitlines()[:-1]  # all but its argv line
    return "\n".join(array_body(lines, members, index_var, profile, first=first)) + "\n"


def array_body(
    head: list[str],
    members: Sequence[JobSpec],
    index_var: str,
    profile: SiteProfile,
    *,
    first: int = 0,
) -> list[str]:
    """An array script's body: `head` (a member's rendered body without its command line: the
    strict mode, prologue and environment the members share) with each element's own output
    files opened before it (a failing prologue's words reach that element's stderr, which
    `get_result` reads), then one `case` branch per element: element `first + i` runs
    members[i], in its folder with its quoted argv. Unknown indices fail loudly."""
    select = f'case "${{{index_var}:-}}" in'
    opens = [
        f"{i}) exec >>{quote(spec.stdout)} 2>>{quote(spec.stderr or spec.stdout)} ;;"
        for i, spec in enumerate(members, first)
        if spec.stdout
    ]
    at = head.index(STRICT) if STRICT in head else len(head)  # after the scheduler's directives
    early = [select, *opens, "esac"] if opens else []
    lines = [*head[:at], *early, *head[at:], select]
    for i, spec in enumerate(members, first):
        steps = []
        if spec.workdir:
            steps.append(f"cd {quote(spec.workdir)}")
        steps.append(render_body(spec, profile)[-1])  # its argv line, container and all
        lines.append(f"{i}) " + "; ".join(steps) + " ;;")
    lines.append(f'*) echo "fedhpc: no such array element: ${{{index_var}:-}}" >&2; exit 97 ;;')
    lines.append("esac")
    return lines
