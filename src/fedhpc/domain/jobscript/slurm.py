"""`#SBATCH` options (sbatch(1)) read into a `Request`; every option gets a fate."""

from __future__ import annotations

from fedhpc.domain.jobscript.model import Fate, Request
from fedhpc.domain.jobscript.reading import WHY, Sink, count, duration, mib

__all__ = ["read_slurm"]

_SHORT = {
    "N": "nodes", "n": "ntasks", "c": "cpus-per-task", "t": "time", "p": "partition",
    "A": "account", "J": "job-name", "o": "output", "e": "error", "a": "array",
    "d": "dependency", "C": "constraint", "G": "gpus", "q": "qos", "D": "chdir",
    "w": "nodelist", "x": "exclude", "L": "licenses", "M": "clusters", "i": "input",
    "m": "distribution", "b": "begin", "B": "extra-node-info", "S": "core-spec",
    "F": "nodefile", "k": "no-kill", "s": "oversubscribe", "O": "overcommit", "H": "hold",
    "W": "wait", "v": "verbose", "Q": "quiet", "h": "help", "V": "version",
}  # fmt: skip
# Options that take no value (a value, if any, comes only after '=').
_FLAGS = {
    "exclusive", "requeue", "no-requeue", "overcommit", "hold", "contiguous", "spread-job",
    "use-min-nodes", "wait", "parsable", "test-only", "oversubscribe", "verbose", "quiet",
    "no-kill", "get-user-env", "ignore-pbs", "reboot", "help", "version", "usage", "x11",
    "kill-on-invalid-dep", "nice",
}  # fmt: skip
_NAMED = {
    "partition": "partition", "account": "account", "job-name": "job_name",
    "output": "output", "error": "output", "array": "array", "dependency": "dependency",
    "constraint": "constraint", "qos": "qos", "mail-type": "mail", "mail-user": "mail",
    "export": "env", "export-file": "env", "get-user-env": "env",
}  # fmt: skip
_FIELD = {"job-name": "job_name", "output": "output", "error": "error", "array": "array"}
_FIELD |= {"partition": "partition", "account": "account", "dependency": "dependency"}
_FIELD |= {"constraint": "constraint"}


def _options(tokens: list[str]) -> list[tuple[str, str | None, str]]:
    """(long name, value, text as written) per option; a stray word is its own option."""
    out: list[tuple[str, str | None, str]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok.startswith("--"):
            name, eq, value = tok[2:].partition("=")
            if eq:
                out.append((name, value, tok))
                continue
        elif tok.startswith("-") and len(tok) >= 2:
            name = _SHORT.get(tok[1], tok[1])
            if len(tok) > 2:
                out.append((name, tok[2:].lstrip("="), tok))
                continue
        else:
            out.append(("", tok, tok))
            continue
        if name not in _FLAGS and i < len(tokens) and not tokens[i].startswith("-"):
            out.append((name, tokens[i], f"{tok} {tokens[i]}"))
            i += 1
        else:
            out.append((name, None, tok))
    return out


def _typed_gpus(value: str) -> tuple[str | None, int]:
    """'[type:]N' (--gpus, --gpus-per-node, --gpus-per-task) -> (type, N)."""
    kind, _, num = value.rpartition(":")
    return (kind or None), count(num)


def _gres(value: str, req: Request) -> list[str]:
    """--gres=gpu[:type][:N][,other...]: the GPUs per node; the other resources returned."""
    rest = []
    for item in value.split(","):
        parts = item.split(":")
        if parts[0] != "gpu":
            rest.append(item)
            continue
        num = parts[-1] if len(parts) > 1 and parts[-1].isdigit() else "1"
        kind = parts[1] if len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()) else None
        req.gpus_per_node = count(num)
        req.gpu_type = kind or req.gpu_type
    return rest


def _apply(name: str, value: str, req: Request) -> str:
    """Read one resource option into `req`; the note saying what it became."""
    if name == "nodes":
        req.nodes = count(value)
        return f"nodes {req.nodes}" + (" (the range's minimum)" if "-" in value else "")
    if name == "ntasks":
        req.ntasks = count(value)
        return f"{req.ntasks} tasks"
    if name == "ntasks-per-node":
        req.tasks_per_node = count(value)
        return f"{req.tasks_per_node} tasks per node, one CPU each unless --cpus-per-task"
    if name == "cpus-per-task":
        req.cpus_per_task = count(value)
        return f"{req.cpus_per_task} CPUs per task"
    if name in ("gpus", "gpus-per-node", "gpus-per-task"):
        kind, num = _typed_gpus(value)
        req.gpu_type = kind or req.gpu_type
        if name == "gpus":
            req.gpus_total = num
        elif name == "gpus-per-node":
            req.gpus_per_node = num
        else:
            req.gpus_per_task = num
        return f"{num} GPUs" + (f" of type {kind}" if kind else "")
    if name == "mem":
        if mib(value) == 0:
            raise ValueError("--mem=0 (all of a node's memory) has no size to carry")
        req.mem_per_node_mib = mib(value)
        return f"memory {req.mem_per_node_mib} MiB per node"
    if name in ("mem-per-cpu", "mem-per-gpu"):
        size = mib(value)
        if name == "mem-per-cpu":
            req.mem_per_cpu_mib = size
        else:
            req.mem_per_gpu_mib = size
        return f"{size} MiB per {name[8:].upper()}, times the {name[8:].upper()}s per node"
    if name == "time":
        req.wall_s = duration(value, bare="m")
        return f"wall time {req.wall_s} s"
    raise KeyError(name)


def read_slurm(tokens: list[str], line: int, req: Request, sink: Sink) -> None:
    """Read one '#SBATCH' line's options into `req`, recording each in `sink`."""
    for name, value, text in _options(tokens):
        if name in _FIELD and value is not None:
            setattr(req, _FIELD[name], value)
        if name in _NAMED:
            why = _NAMED[name]
            fate: Fate = "fedhpc" if why in ("job_name", "output") else "dropped"
            sink.add(line, text, fate, WHY[why])
            continue
        if name == "gres" and value is not None:
            try:
                rest = _gres(value, req)
            except ValueError as exc:
                sink.drop(line, text, f"cannot read it: {exc}")
                continue
            if len(rest) < len(value.split(",")):
                sink.add(line, text, "envelope", f"{req.gpus_per_node} GPUs per node")
            if rest:
                sink.drop(line, text, f"{','.join(rest)}: only GPUs are carried from --gres")
            continue
        if value is not None:
            try:
                note = _apply(name, value, req)
            except KeyError:
                pass
            except ValueError as exc:
                sink.drop(line, text, f"cannot read it: {exc}")
                continue
            else:
                sink.add(line, text, "envelope", note)
                continue
        if name in ("chdir", "time-min", "exclusive", "nodelist", "exclude", "licenses"):
            sink.drop(line, text, f"--{name}: the site decides it; not carried over")
        else:
            sink.drop(line, text, "unknown")
