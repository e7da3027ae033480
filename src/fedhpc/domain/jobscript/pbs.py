"""`#PBS` options (qsub(1B), pbs_resources(7B); Torque's nodes=N:ppn=C) read into a
`Request`; every option and every resource of `-l` gets a fate."""

from __future__ import annotations

from fedhpc.domain.jobscript.model import Fate, Request
from fedhpc.domain.jobscript.reading import WHY, Sink, bytes_mib, count, duration

__all__ = ["read_pbs"]

_FLAGS = set("VhIXzf")
_NAMED = {
    "q": "partition", "A": "account", "P": "account", "N": "job_name", "o": "output",
    "e": "output", "j": "output", "J": "array", "m": "mail", "M": "mail", "v": "env",
    "V": "env", "S": "shell", "I": "interactive", "X": "interactive",
}  # fmt: skip
_FIELD = {"q": "partition", "A": "account", "N": "job_name", "o": "output", "e": "error"}
_FIELD["J"] = "array"
_CHUNK = {"ncpus": "cpus_per_node", "ngpus": "gpus_per_node", "mpiprocs": "tasks_per_node"}


def _options(tokens: list[str]) -> list[tuple[str, str | None, str]]:
    out: list[tuple[str, str | None, str]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("-") or len(tok) < 2:
            out.append(("", tok, tok))
        elif len(tok) > 2:
            out.append((tok[1], tok[2:], tok))
        elif tok[1] not in _FLAGS and i < len(tokens):
            out.append((tok[1], tokens[i], f"{tok} {tokens[i]}"))
            i += 1
        else:
            out.append((tok[1], None, tok))
    return out


def _chunk(text: str, req: Request) -> list[str]:
    """'N:ncpus=C:ngpus=G:mem=M:mpiprocs=T' (one chunk per node); unread keys returned."""
    parts = text.split(":")
    rest = []
    if parts[0].isdigit():
        req.nodes = count(parts.pop(0))
    for part in parts:
        key, _, value = part.partition("=")
        if key in _CHUNK:
            setattr(req, _CHUNK[key], count(value))
        elif key == "mem":
            req.mem_per_node_mib = bytes_mib(value)
        elif key == "ompthreads":
            continue  # threads per rank: the CPUs are already counted by ncpus
        else:
            rest.append(part)
    return rest


def _resource(key: str, value: str, req: Request) -> tuple[Fate, str]:
    """One `-l key=value`: (fate, note)."""
    if key == "select":
        chunks = value.split("+")
        rest = _chunk(chunks[0], req)
        if len(chunks) > 1 or rest:
            skipped = [*rest, *chunks[1:]]
            return "dropped", f"read the first chunk; not carried over: {'+'.join(skipped)}"
        return "envelope", "one chunk per node"
    if key == "nodes":
        first, *more = value.split(":")
        if not first.isdigit():
            return "dropped", "names hosts: the site decides them"
        req.nodes = count(first)
        rest = []
        for part in more:
            k, _, v = part.partition("=")
            if k == "ppn":
                req.cpus_per_node = count(v)
            elif k == "gpus":
                req.gpus_per_node = count(v)
            else:
                rest.append(part)
        if rest:
            return "dropped", f"nodes and ppn read; not carried over: {':'.join(rest)}"
        return "envelope", f"{req.nodes} nodes"
    if key == "walltime":
        req.wall_s = duration(value, bare="s")
        return "envelope", f"wall time {req.wall_s} s"
    if key == "mem":
        req.mem_total_mib = bytes_mib(value)
        return "envelope", f"{req.mem_total_mib} MiB for the job, split over its nodes"
    if key in ("ncpus", "ngpus"):
        setattr(req, _CHUNK[key], count(value))
        return "envelope", f"{value} {key[1:].upper()}s per node"
    if key == "place":
        return "fedhpc", "fedhpc places one chunk per node"
    return "dropped", "a site-specific resource; not carried over"


def read_pbs(tokens: list[str], line: int, req: Request, sink: Sink) -> None:
    """Read one '#PBS' line's options into `req`, recording each in `sink`."""
    for flag, value, text in _options(tokens):
        if flag in _FIELD and value is not None:
            setattr(req, _FIELD[flag], value)
        if flag == "l" and value is not None:
            for item in value.split(","):
                key, _, val = item.partition("=")
                try:
                    fate, note = _resource(key, val, req)
                except ValueError as exc:
                    sink.drop(line, f"-l {item}", f"cannot read it: {exc}")
                    continue
                sink.add(line, f"-l {item}", fate, note)
        elif flag == "W" and value is not None and value.startswith("depend="):
            req.dependency = value[len("depend=") :]
            sink.drop(line, text, "dependency")
        elif flag in _NAMED:
            why = _NAMED[flag]
            own = why in ("job_name", "output", "shell")
            sink.add(line, text, "fedhpc" if own else "dropped", WHY[why])
        else:
            sink.drop(line, text, "unknown")
