"""Fake model servers on loopback for the end-to-end continuation tests.

`FakeAnthropic` speaks the Messages API (SSE, what Claude Code sends with ANTHROPIC_BASE_URL);
`FakeOpenAI` speaks the Responses API (SSE, a Codex `model_providers` entry with
`wire_api = "responses"`). Both play the same scripted agent, decided from what each request
carries (so a resumed CLI process finds the same script):

* the first turn calls fedhpc `submit_task` (1 CPU, wall 5m, `bash -c "echo done"`);
* the tool result of `submit_task` -> a text answer that ends the turn (the agent goes idle);
* a later user prompt holding fedhpc continuation payloads (the resume; several when events
  were coalesced), or pointing at payloads already in the session (a retry's nudge) ->
  `get_result` for the first payload's task; a later prompt without either is recorded in
  `errors`;
* the tool result of `get_result` -> a closing text.

Every request is recorded as an `Exchange`, so tests count model turns, tool calls, resumes,
and scan the tool results the model received. `hold_resume()` makes the resume's answer wait
until the test releases it (to kill the daemon while a delivery is `started`); `down` makes
every agent request fail with HTTP 529 (the model endpoint is down) until cleared.

`ProxyTrap` and `NetWatch` check that nothing leaves loopback: the first is the HTTP(S) proxy
the CLIs are given (any request reaching it went for a non-loopback host), the second samples
the sockets of every process carrying a marker variable in its environment."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, Self

__all__ = [
    "CANARY_API_KEY",
    "CANARY_SECRET",
    "PAYLOAD_MARK",
    "SUBMIT_ARGS",
    "Exchange",
    "FakeAnthropic",
    "FakeModel",
    "FakeOpenAI",
    "NetWatch",
    "ProxyTrap",
    "no_egress",
    "result_json",
]

PAYLOAD_MARK = '"fedhpc":"continuation"'
SUBMIT_ARGS: dict[str, Any] = {
    "command": ["bash", "-c", "echo done"],
    "envelope": {"cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m", "max": "5m"}},
    "name": "e2e-echo",
}
_PAYLOAD = re.compile(r"\{[^\n]*\"fedhpc\":\"continuation\"[^\n]*\}")
NUDGE_MARK = "fedhpc: the event(s) "


def payloads_in(text: str) -> list[dict[str, Any]]:
    """Every continuation payload line in a text, in order."""
    return [json.loads(m.group(0)) for m in _PAYLOAD.finditer(text)]


_REPLIES = {  # the closing text of a turn, by phase
    "after_submit": "Submitted. Ending my turn: fedhpc resumes me with the outcome.",
    "after_result": "FAKE-MODEL: the task is done.",
}


@dataclass
class Exchange:
    """One request to the fake model and what it answered."""

    at: float  # time.time() when the request arrived
    path: str
    phase: str  # start | after_submit | resume | after_result | unexpected | aux
    tool: str | None = None  # the fedhpc tool the answer calls, if any
    arguments: dict[str, Any] = field(default_factory=dict)
    tool_results: list[str] = field(default_factory=list)  # what the model was fed back
    prompt: str = ""  # the newest user text
    payload: dict[str, Any] | None = None  # the (first) continuation payload, on a resume
    payloads: list[dict[str, Any]] = field(default_factory=list)  # all of this resume's
    history: list[str] = field(default_factory=list)  # every user text of the conversation
    tools: list[str] = field(default_factory=list)  # the fedhpc tools the request offered
    session: str | None = None  # the client's session header, when it sends one
    shape: str = ""  # the newest message's role and block types (to tell odd requests apart)


@dataclass(frozen=True)
class _Turn:
    """What a request asks of the model, whatever the wire format."""

    has_tools: bool
    result_of: str | None  # the fedhpc tool whose result closes the input, if any
    results: list[str]
    prompt: str
    history: list[str] = field(default_factory=list)  # every user text, oldest first
    tools: list[str] = field(default_factory=list)


class FakeModel:
    """The shared script and recorder; subclasses speak one wire format."""

    paths: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []
        self.errors: list[str] = []
        self.extra: list[tuple[str, str]] = []  # (method, path) outside the model API
        self._lock = threading.Lock()
        self._hold: threading.Event | None = None
        self.resume_seen = threading.Event()
        self.down = False  # agent requests answer 529 while set
        self.submit_args: dict[str, Any] = SUBMIT_ARGS  # what the first turn submits
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Self:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._other(self)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                if not path.endswith(fake.paths):
                    fake._other(self)
                    return
                try:
                    body = json.loads(raw or b"{}")
                    status, ctype, out = fake._answer(path, body, dict(self.headers.items()))
                except Exception as exc:  # the CLI sees a 500; the test sees why
                    fake.errors.append(f"{type(exc).__name__}: {exc}")
                    status, ctype, out = 500, "application/json", b'{"error":"fake"}'
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._hold is not None:
            self._hold.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _other(self, handler: BaseHTTPRequestHandler) -> None:
        self.extra.append((handler.command, handler.path))
        out = b'{"data":[],"models":[]}'
        handler.send_response(404 if handler.command == "POST" else 200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(out)))
        handler.end_headers()
        handler.wfile.write(out)

    # -- the script ---------------------------------------------------------------------
    def hold_resume(self) -> threading.Event:
        """Answer the resume only once the returned event is set."""
        self._hold = threading.Event()
        return self._hold

    def _decide(self, turn: _Turn, ex: Exchange) -> None:
        if not turn.has_tools:
            ex.phase = "aux"  # a side query (titles, quota): not an agent turn
            return
        if turn.result_of == "submit_task":
            ex.phase = "after_submit"
        elif turn.result_of == "get_result":
            ex.phase = "after_result"
        elif turn.result_of is not None:
            ex.phase = "unexpected"
            self.errors.append(f"a result of {turn.result_of} reached the model")
        elif PAYLOAD_MARK in turn.prompt or NUDGE_MARK in turn.prompt:
            ex.phase = "resume"
            ex.payloads = payloads_in(turn.prompt)
            if NUDGE_MARK in turn.prompt:  # events already in the session: find them there
                held = [
                    p
                    for text in turn.history[:-1]
                    for p in payloads_in(text)
                    if p["delivery"] in turn.prompt
                ]
                ex.payloads = held + ex.payloads
            if not ex.payloads:
                self.errors.append("the resume prompt holds no parseable payload")
                return
            ex.payload = ex.payloads[0]
            task = ex.payload.get("task_id") or ex.payload.get("subject")
            ex.tool, ex.arguments = "get_result", {"task_id": task}
        elif any(e.phase == "start" and e.session == ex.session for e in self.exchanges):
            ex.phase = "unexpected"
            self.errors.append(f"a later prompt without the payload: {turn.prompt[:200]!r}")
        else:
            ex.phase = "start"
            ex.tool, ex.arguments = "submit_task", self.submit_args

    def _record(self, path: str, turn: _Turn, session: str | None) -> Exchange:
        ex = Exchange(
            at=time.time(),
            path=path,
            phase="",
            tool_results=turn.results,
            prompt=turn.prompt,
            session=session,
            history=turn.history,
            tools=turn.tools,
        )
        if self.down and turn.has_tools:
            ex.phase = "down"
            with self._lock:
                self.exchanges.append(ex)
            return ex
        with self._lock:
            self._decide(turn, ex)
            hold = self._hold  # taken before the test can see this resume and hold the next
            self.exchanges.append(ex)
        if ex.phase == "resume":
            self.resume_seen.set()
            if hold is not None and not hold.wait(180):
                self.errors.append("the held resume was never released")
        return ex

    def _answer(
        self, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        raise NotImplementedError

    # -- what tests ask -----------------------------------------------------------------
    def phases(self, session: str | None = None) -> list[str]:
        return [
            e.phase
            for e in self.exchanges
            if e.phase not in ("aux", "down") and (session is None or e.session == session)
        ]

    def seen_deliveries(self, session: str | None = None) -> list[str]:
        """The delivery ids in the newest conversation the model received (of `session`), in
        order, each as often as it appears: a forked transcript or a re-sent event shows."""
        agent = [
            e
            for e in self.exchanges
            if e.phase not in ("aux", "down") and (session is None or e.session == session)
        ]
        if not agent:
            return []
        return [p["delivery"] for text in agent[-1].history for p in payloads_in(text)]

    def tool_calls(self) -> list[str]:
        return [e.tool for e in self.exchanges if e.tool]

    def resumes(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.phase == "resume"]

    def status_calls_between_submit_and_resume(self) -> list[str]:
        """Tools the model called after submit_task and before its first resume."""
        calls = [e for e in self.exchanges if e.tool]
        start = next(i for i, e in enumerate(calls) if e.tool == "submit_task")
        between = []
        for e in calls[start + 1 :]:
            if e.phase == "resume":
                break
            between.append(str(e.tool))
        return between


def _texts(content: Any) -> list[str]:
    """The text parts of a message content (a string, or a list of typed blocks)."""
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict):
            kind = block.get("type")
            if kind in ("text", "input_text", "output_text") and isinstance(block.get("text"), str):
                out.append(block["text"])
            elif kind == "tool_result":
                out += _texts(block.get("content"))
    return out


def _sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


class FakeAnthropic(FakeModel):
    """POST /v1/messages with `stream: true`; tools are `mcp__fedhpc__<tool>`."""

    paths = ("/v1/messages", "/v1/messages/count_tokens")
    PREFIX = "mcp__fedhpc__"

    def _turn(self, body: dict[str, Any]) -> _Turn:
        messages = body.get("messages") or []
        names: dict[str, str] = {}
        for m in messages:
            for b in m.get("content") if isinstance(m.get("content"), list) else []:
                if isinstance(b, dict) and b.get("type") == "tool_use":
                    names[str(b.get("id"))] = str(b.get("name"))
        # Claude Code sometimes appends a `system` message (a reminder) after the user's
        convo = [m for m in messages if m.get("role") != "system"]
        last: dict[str, Any] = convo[-1] if convo else {"role": "user", "content": ""}
        result_of = None
        results: list[str] = []
        blocks = last.get("content")
        for b in blocks if isinstance(blocks, list) else []:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                name = names.get(str(b.get("tool_use_id")), "?")
                result_of = name.removeprefix(self.PREFIX)
                results += _texts(b.get("content"))
        prompt = "\n".join(_texts(last.get("content"))) if last.get("role") == "user" else ""
        offered = [str(t.get("name", "")) for t in body.get("tools") or []]
        tools = [n for n in offered if n.startswith(self.PREFIX)]
        history = [
            "\n".join(
                t
                for t in _texts(m.get("content"))
                if PAYLOAD_MARK in t or NUDGE_MARK in t or m is last
            )
            for m in messages
            if m.get("role") == "user"
        ]
        return _Turn(bool(tools), result_of, results, "" if result_of else prompt, history, tools)

    def _answer(
        self, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        if path.endswith("count_tokens"):
            return 200, "application/json", b'{"input_tokens":12}'
        session = headers.get("x-claude-code-session-id") or headers.get("X-Claude-Code-Session-Id")
        ex = self._record(path, self._turn(body), session)
        last = (body.get("messages") or [{}])[-1]
        blocks = last.get("content")
        kinds = (
            [b.get("type") for b in blocks if isinstance(b, dict)]
            if isinstance(blocks, list)
            else ["str"]
        )
        ex.shape = (
            f"{last.get('role')}:{','.join(map(str, kinds))} n={len(body.get('messages') or [])}"
        )
        if ex.phase == "down":
            err = b'{"type":"error","error":{"type":"overloaded_error","message":"down"}}'
            return 529, "application/json", err
        mid = f"msg_{uuid.uuid4().hex[:20]}"
        if ex.tool:
            block = {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:20]}",
                "name": self.PREFIX + ex.tool,
                "input": {},
            }
            delta = {"type": "input_json_delta", "partial_json": json.dumps(ex.arguments)}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": _REPLIES.get(ex.phase, "ok")}
            stop = "end_turn"
        usage = {"input_tokens": 12, "output_tokens": 3}
        if not body.get("stream"):
            final = dict(block)
            if ex.tool:
                final["input"] = ex.arguments
            else:
                final["text"] = delta["text"]
            msg = {
                "id": mid,
                "type": "message",
                "role": "assistant",
                "model": body.get("model"),
                "content": [final],
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": usage,
            }
            return 200, "application/json", json.dumps(msg).encode()
        events: list[dict[str, Any]] = [
            {
                "type": "message_start",
                "message": {
                    "id": mid,
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model"),
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": usage,
                },
            },
            {"type": "content_block_start", "index": 0, "content_block": block},
            {"type": "content_block_delta", "index": 0, "delta": delta},
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 3},
            },
            {"type": "message_stop"},
        ]
        return 200, "text/event-stream", _sse(events)


class FakeOpenAI(FakeModel):
    """POST /v1/responses (SSE); tools arrive as the namespace `mcp__fedhpc`."""

    paths = ("/responses",)
    NAMESPACE = "mcp__fedhpc"

    def _turn(self, body: dict[str, Any]) -> _Turn:
        items = [i for i in body.get("input") or [] if isinstance(i, dict)]
        names = {
            str(i.get("call_id")): str(i.get("name"))
            for i in items
            if i.get("type") == "function_call"
        }
        result_of = None
        results: list[str] = []
        tail: list[dict[str, Any]] = []
        for item in reversed(items):  # the newest user messages, or the newest tool output
            if item.get("type") == "function_call_output":
                if not tail:
                    result_of = names.get(str(item.get("call_id")), "?").split("__")[-1]
                    out = item.get("output")
                    results.append(out if isinstance(out, str) else json.dumps(out))
                break
            if item.get("type") == "message" and item.get("role") == "user":
                tail.append(item)
            elif item.get("type") == "message" and item.get("role") == "developer":
                continue
            else:
                break
        prompt = "\n".join(t for m in reversed(tail) for t in _texts(m.get("content")))
        tools = json.dumps(body.get("tools") or [])
        has_tools = self.NAMESPACE in tools or "submit_task" in tools
        history = [
            "\n".join(_texts(i.get("content")))
            for i in items
            if i.get("type") == "message" and i.get("role") == "user"
        ]
        return _Turn(
            has_tools, result_of, results, prompt, history, [self.NAMESPACE] if has_tools else []
        )

    def _answer(
        self, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        session = headers.get("session-id") or headers.get("Session-Id")
        ex = self._record(path, self._turn(body), session)
        if ex.phase == "down":
            return 503, "application/json", b'{"error":{"message":"down","type":"server_error"}}'
        rid = f"resp_{uuid.uuid4().hex[:20]}"
        if ex.tool:
            item: dict[str, Any] = {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:20]}",
                "call_id": f"call_{uuid.uuid4().hex[:20]}",
                "namespace": self.NAMESPACE,
                "name": ex.tool,
                "arguments": json.dumps(ex.arguments),
                "status": "completed",
            }
        else:
            text = {"type": "output_text", "text": _REPLIES.get(ex.phase, "ok"), "annotations": []}
            item = {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:20]}",
                "role": "assistant",
                "status": "completed",
                "content": [text],
            }
        usage = {
            "input_tokens": 12,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 3,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        }
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {"id": rid}},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": {"id": rid, "usage": usage}},
        ]
        return 200, "text/event-stream", _sse(events)


class ProxyTrap:
    """A loopback HTTP proxy that refuses everything and records what reached it: give it to
    the CLIs as HTTP(S)_PROXY with NO_PROXY=loopback, and any non-loopback request shows up."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def env(self) -> dict[str, str]:
        loop = "127.0.0.1,localhost,::1"
        return {
            "HTTP_PROXY": self.url,
            "HTTPS_PROXY": self.url,
            "ALL_PROXY": self.url,
            "http_proxy": self.url,
            "https_proxy": self.url,
            "all_proxy": self.url,
            "NO_PROXY": loop,
            "no_proxy": loop,
        }

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    first = conn.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")
                except OSError:
                    first = "<unreadable>"
                if not self._stop:
                    self.hits.append(first)
                    conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    def __enter__(self) -> ProxyTrap:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._sock.close()


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                out.add(target[8:-1])
    except OSError:
        pass
    return out


def _remote(hex_addr: str) -> str | None:
    """The remote address of a /proc/net row, or None when it is loopback or unset."""
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:
        words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
        ip = socket.inet_ntop(socket.AF_INET6, words)
        ip = ip.removeprefix("::ffff:")
    if ip in ("0.0.0.0", "::", "::1") or ip.startswith("127."):
        return None
    return f"{ip}:{int(port, 16)}"


class NetWatch:
    """Samples, every `period` s, the TCP/UDP sockets of every process whose environment holds
    `FEDHPC_E2E_MARK=<mark>`, and records each non-loopback peer (connecting or connected)."""

    def __init__(self, period: float = 0.1) -> None:
        self.mark = uuid.uuid4().hex
        self.period = period
        self.peers: set[str] = set()
        self.pids: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def env(self) -> dict[str, str]:
        return {"FEDHPC_E2E_MARK": self.mark}

    def _marked(self) -> list[int]:
        needle = f"FEDHPC_E2E_MARK={self.mark}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if needle in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def _sample(self) -> None:
        pids = self._marked()
        self.pids.update(pids)
        inodes: set[str] = set()
        for pid in pids:
            inodes |= _socket_inodes(pid)
        if not inodes:
            return
        for table in ("tcp", "tcp6", "udp", "udp6"):
            try:
                rows = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                cols = row.split()
                if len(cols) > 9 and cols[9] in inodes:
                    peer = _remote(cols[2])
                    if peer is not None:
                        self.peers.add(f"{table} {peer}")

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._sample()

    def __enter__(self) -> NetWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@contextmanager
def no_egress() -> Iterator[tuple[ProxyTrap, NetWatch]]:
    """Both loopback guards, for a test's `with`."""
    with ProxyTrap() as trap, NetWatch() as watch:
        yield trap, watch


# -- the e2e harness shared by test_e2e_claude.py and test_e2e_codex.py ----------------------
CANARY_SECRET = f"CANARY-globus-{uuid.uuid4().hex}"
CANARY_API_KEY = f"sk-fake-CANARY-{uuid.uuid4().hex}"


def canary_env() -> dict[str, str]:
    """Credentials planted in every process's environment; none may reach a payload."""
    return {
        "GLOBUS_COMPUTE_CLIENT_ID": str(uuid.uuid4()),
        "GLOBUS_COMPUTE_CLIENT_SECRET": CANARY_SECRET,
    }


def leaks(texts: dict[str, str]) -> list[str]:
    """The names of the texts that contain a canary."""
    return [name for name, text in texts.items() if CANARY_SECRET in text or CANARY_API_KEY in text]


def delivery_files(home: Path) -> dict[str, str]:
    """Every payload and resume output the bridge wrote, by path."""
    root = home / "deliveries"
    return {
        str(p): p.read_text(errors="replace")
        for p in sorted(root.glob("*/*"))
        if p.name in ("prompt.txt", "stdin", "out", "err")
    }


def result_json(text: str) -> dict[str, Any]:
    """The JSON object in a tool result as the model saw it (Codex prefixes
    'Wall time: ...\\nOutput:\\n'; Claude Code sends the structured content alone)."""
    obj, _ = json.JSONDecoder().raw_decode(text[text.index("{") :])
    assert isinstance(obj, dict)
    return obj
