"""`#BSUB` options (bsub(1); -R resource strings, -gpu, Summit's -nnodes) read into a
`Request`; every option and every section of `-R` gets a fate."""

from __future__ import annotations

import re

from fedhpc.domain.jobscript.model import Fate, Request
from fedhpc.domain.jobscript.reading import WHY, Sink, count, mib

__all__ = ["read_lsf"]

_FLAGS = {"-x", "-B", "-N", "-K", "-r", "-rn", "-H", "-I", "-Ip", "-Is", "-ul", "-hl"}
_NAMED = {
    "-q": "partition", "-P": "account", "-G": "account", "-o": "output", "-oo": "output",
    "-e": "output", "-eo": "output", "-u": "mail", "-B": "mail", "-N": "mail",
    "-env": "env", "-L": "shell", "-I": "interactive", "-Ip": "interactive",
    "-Is": "interactive",
}  # fmt: skip
_FIELD = {"-q": "partition", "-P": "account", "-o": "output", "-oo": "output"}
_FIELD |= {"-e": "error", "-eo": "error", "-w": "dependency"}
_SECTION = re.compile(r"(\w+)\[([^\]]*)\]")
_JOB = re.compile(r"^([^\[]*)(\[[^\]]+\](?:%\d+)?)?$")


def _options(tokens: list[str]) -> list[tuple[str, str | None, str]]:
    out: list[tuple[str, str | None, str]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("-"):
            out.append(("", tok, tok))
        elif tok not in _FLAGS and i < len(tokens):
            out.append((tok, tokens[i], f"{tok} {tokens[i]}"))
            i += 1
        else:
            out.append((tok, None, tok))
    return out


def _wall(text: str) -> int:
    """-W [hours:]minutes[/host] -> seconds."""
    head = text.split("/", 1)[0]
    hours, _, minutes = head.rpartition(":")
    total = (int(hours) * 60 if hours else 0) + int(minutes)
    if not 0 < total <= 10 * 366 * 24 * 60:
        raise ValueError(f"{text!r} is not a time limit")
    return total * 60


def _sections(value: str, req: Request) -> tuple[list[str], list[str]]:
    """-R 'span[ptile=T] rusage[mem=M] affinity[core(C)] select[...]': (read, not read)."""
    read, rest = [], []
    for name, inner in _SECTION.findall(value):
        key, _, val = inner.partition("=")
        if name == "span" and key == "ptile":
            req.tasks_per_node = count(val)
        elif name == "span" and inner == "hosts=1":
            req.nodes = 1
        elif name == "rusage" and key == "mem":
            req.mem_per_task_mib = mib(val.split(":")[0].split("/")[0])
        elif name == "affinity" and (m := re.match(r"^core\((\d+)\)", inner)):
            req.cpus_per_task = count(m.group(1))
        else:
            rest.append(f"{name}[{inner}]")
            continue
        read.append(f"{name}[{inner}]")
    leftover = _SECTION.sub("", value).strip()
    if leftover:
        rest.append(leftover)
    return read, rest


def _gpu(value: str, req: Request) -> list[str]:
    """-gpu 'num=G:mode=...:gmodel=...' (per host), or '-' for the default (one)."""
    rest = []
    req.gpus_per_node = 1
    for part in [] if value == "-" else value.split(":"):
        key, _, val = part.partition("=")
        if key == "num":
            req.gpus_per_node = count(val.split("/")[0])
        else:
            rest.append(part)
    return rest


def _apply(flag: str, value: str, req: Request) -> tuple[Fate, str]:
    """One resource option: (fate, note); KeyError when `flag` is none of them."""
    if flag == "-n":
        req.ntasks = count(value.split(",", maxsplit=1)[0])
        return "envelope", f"{req.ntasks} slots"
    if flag == "-nnodes":
        req.nodes = count(value)
        return "envelope", f"{req.nodes} nodes"
    if flag == "-W":
        req.wall_s = _wall(value)
        return "envelope", f"wall time {req.wall_s} s"
    if flag == "-R":
        read, rest = _sections(value, req)
        if rest:
            return "dropped", f"read {' '.join(read) or 'nothing'}; not carried: {' '.join(rest)}"
        return "envelope", f"read {' '.join(read)}"
    if flag == "-gpu":
        rest = _gpu(value, req)
        if rest:
            return "dropped", f"{req.gpus_per_node} GPUs per host read; not carried: {rest}"
        return "envelope", f"{req.gpus_per_node} GPUs per host"
    if flag == "-M":
        return "dropped", "a per-process memory limit, not a request: use rusage[mem=...]"
    raise KeyError(flag)


def read_lsf(tokens: list[str], line: int, req: Request, sink: Sink) -> None:
    """Read one '#BSUB' line's options into `req`, recording each in `sink`."""
    for flag, value, text in _options(tokens):
        if flag in _FIELD and value is not None:
            setattr(req, _FIELD[flag], value)
        if flag == "-J" and value is not None and (m := _JOB.match(value)):
            req.job_name = m.group(1) or None
            req.array = m.group(2)
            sink.add(line, text, "fedhpc", WHY["job_name"])
            if m.group(2):
                sink.drop(line, text, "array")
            continue
        if flag == "-w":
            sink.drop(line, text, "dependency")
            continue
        if flag in _NAMED:
            why = _NAMED[flag]
            fate: Fate = "fedhpc" if why in ("output", "shell") else "dropped"
            sink.add(line, text, fate, WHY[why])
            continue
        if value is not None:
            try:
                fate, note = _apply(flag, value, req)
            except KeyError:
                pass
            except ValueError as exc:
                sink.drop(line, text, f"cannot read it: {exc}")
                continue
            else:
                sink.add(line, text, fate, note)
                continue
        sink.drop(line, text, "unknown")
