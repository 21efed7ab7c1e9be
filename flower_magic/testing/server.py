"""A scripted fake of the Anthropic Messages API, for the real Claude Code CLI to talk to.

Stdlib only. It serves ``POST /v1/messages`` on 127.0.0.1 with streamed (SSE) or plain JSON answers
taken from a script of ``Reply`` objects, logs every request (credentials removed) so a test can
assert exactly what history the model was sent, and can be stopped and restarted on the same port to
play a network outage.

Guarantees:
    - Replies are handed out in script order; a reply with ``match`` only answers requests it accepts.
    - With ``strict=True`` (the default) a request whose ``tool_use`` blocks are not answered by
      ``tool_result`` blocks in the next message is rejected with a 400, as the real API does.
    - API keys and tokens never enter the request log.
Not guaranteed:
    - Token counts are estimates (4 characters a token) unless the reply sets ``usage``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from flower_magic.testing.replies import Reply
from flower_magic.testing.request import SECRET_HEADERS, Request

# A dummy key the CLI accepts as "configured"; the fake server never checks it.
FAKE_API_KEY = "fake-key-for-flower-tests"
CHARS_PER_TOKEN = 4  # rough, but makes context grow as a conversation grows
# The real API streams a long answer in many small deltas; one 70 MB delta instead takes the CLI twice
# as long to take in (measured), so long text and tool input go out in pieces of this many characters.
DELTA_CHARS = 64 * 1024


class NoScriptedReply(LookupError):
    pass


def tool_pairing_error(messages: list[dict[str, Any]]) -> str | None:
    """The real API's 400 for an unpaired ``tool_use`` / ``tool_result``, or None if the history is valid."""
    for i, msg in enumerate(messages):
        content = msg.get("content")
        blocks = content if isinstance(content, list) else []
        if msg.get("role") != "assistant":
            continue
        uses = [b.get("id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
        if not uses:
            continue
        nxt = messages[i + 1] if i + 1 < len(messages) else None
        nxt_content = nxt.get("content") if nxt else None
        nxt_blocks: list[Any] = nxt_content if isinstance(nxt_content, list) else []
        answered = {b.get("tool_use_id") for b in nxt_blocks if isinstance(b, dict) and b.get("type") == "tool_result"}
        missing = [u for u in uses if u not in answered]
        if missing:
            return (
                f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                f"{', '.join(map(str, missing))}. Each `tool_use` block must have a corresponding `tool_result` "
                "block in the next message."
            )
    for i, msg in enumerate(messages):
        content = msg.get("content")
        if msg.get("role") != "user" or not isinstance(content, list):
            continue
        prev = messages[i - 1] if i > 0 else None
        prev_content = prev.get("content") if prev else None
        prev_blocks: list[Any] = prev_content if isinstance(prev_content, list) else []
        offered = {b.get("id") for b in prev_blocks if isinstance(b, dict) and b.get("type") == "tool_use"}
        for j, block in enumerate(content):
            is_result = isinstance(block, dict) and block.get("type") == "tool_result"
            if is_result and block.get("tool_use_id") not in offered:
                return (
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message."
                )
    return None


class FakeAnthropic:
    """A fake Messages API on loopback.

    Args:
        script: replies, answered in order (see ``flower_magic.testing.replies``).
        default: answer for requests no scripted reply accepts (a reply, or a function of the request
            that returns one: a tiny "model"); ``None`` answers them with a 400
            that says the script ran out (the CLI then fails the turn, which makes a test fail loudly).
        port: 0 picks a free port; the port is kept across ``stop()``/``start()``.
        strict: reject histories with unpaired tool calls, as the real API does.

    Use it as a context manager, or call ``start()`` / ``close()``.
    """

    def __init__(
        self,
        script: Iterable[Reply] = (),
        *,
        default: Reply | Callable[[Request], Reply] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        strict: bool = True,
    ) -> None:
        self.host = host
        self.port = port
        self.strict = strict
        self.default = default
        self._script: list[Reply] = list(script)
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._arrived = threading.Condition(self._lock)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> FakeAnthropic:
        if self._server is not None:
            return self
        self._stopping.clear()
        handler = _make_handler(self)
        deadline = time.monotonic() + 10
        while True:
            try:
                server = ThreadingHTTPServer((self.host, self.port), handler)
                break
            except OSError:
                # Restarting on the same port right after stop(): the old socket may linger briefly.
                if time.monotonic() > deadline or self.port == 0:
                    raise
                time.sleep(0.05)
        server.daemon_threads = True
        server.handle_error = _quiet_disconnects(server.handle_error)  # type: ignore[method-assign]
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, name="fake-anthropic", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening (new connections are refused) and end any hanging answer."""
        self._stopping.set()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    close = stop

    @property
    def running(self) -> bool:
        return self._server is not None

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def env(self, home: str | Path | None = None) -> dict[str, str]:
        """Environment for a Claude Code CLI (or a flower run) that should talk to this server.

        Args:
            home: a throw-away home directory; ``CLAUDE_CONFIG_DIR`` is put under it so a user's real
                ``~/.claude`` is never read or written.
        """
        env = {
            "ANTHROPIC_BASE_URL": self.url,
            "ANTHROPIC_API_KEY": FAKE_API_KEY,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
        if home is not None:
            home = Path(home)
            env["HOME"] = str(home)
            env["CLAUDE_CONFIG_DIR"] = str(home / ".claude")
        return env

    # -- script --------------------------------------------------------------------------------

    def add(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def clear(self) -> None:
        """Forget every reply not yet used (the request log is kept)."""
        with self._lock:
            self._script.clear()

    def pending(self) -> list[Reply]:
        with self._lock:
            return list(self._script)

    def _take(self, request: Request) -> Reply:
        with self._lock:
            for i, reply in enumerate(self._script):
                if reply.accepts(request):
                    if reply.times is not None:
                        reply.times -= 1
                        if reply.times <= 0:
                            del self._script[i]
                    return reply
        if callable(self.default):
            return self.default(request)
        if self.default is not None:
            return self.default
        raise NoScriptedReply(
            f"fake API: no scripted reply for request #{request.index} "
            f"(last user text: {request.last_user_text[-200:]!r})"
        )

    # -- log -----------------------------------------------------------------------------------

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def _log(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> Request:
        with self._arrived:
            req = Request(index=len(self._requests), path=path, body=body, headers=headers)
            self._requests.append(req)
            self._arrived.notify_all()
            return req

    def wait_for_requests(self, n: int, timeout: float = 30.0) -> list[Request]:
        """Block until at least ``n`` requests arrived; returns the log. Raises TimeoutError."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while len(self._requests) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"fake API got {len(self._requests)} requests, waited for {n}")
                self._arrived.wait(left)
            return list(self._requests)

    def dump_log(self, path: str | Path) -> None:
        Path(path).write_text(
            json.dumps([r.to_dict() for r in self.requests], ensure_ascii=False, indent=2), encoding="utf-8"
        )


# -- HTTP ------------------------------------------------------------------------------------------


def _quiet_disconnects(default: Any) -> Any:
    """A client that goes away mid-answer (a killed CLI, a dropped test) is normal here, not an error."""

    def handle_error(request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            return
        default(request, client_address)

    return handle_error


def _estimate_tokens(body: dict[str, Any]) -> int:
    raw = json.dumps(body.get("messages", []), ensure_ascii=False) + json.dumps(body.get("system", ""))
    return max(1, len(raw) // CHARS_PER_TOKEN)


def _usage(reply: Reply, body: dict[str, Any]) -> dict[str, int]:
    usage = {
        "input_tokens": _estimate_tokens(body),
        "output_tokens": max(1, sum(len(json.dumps(b)) for b in reply.content) // CHARS_PER_TOKEN),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    usage.update(reply.usage)
    return usage


def _message(reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_" + uuid.uuid4().hex[:24],
        "type": "message",
        "role": "assistant",
        "model": reply.model or body.get("model") or "claude-fake",
        "content": reply.content,
        "stop_reason": reply.final_stop_reason(),
        "stop_sequence": None,
        "usage": _usage(reply, body),
    }


def _pieces(text: str) -> Iterator[str]:
    """``text`` in deltas of at most ``DELTA_CHARS`` (one delta when it is short, as before)."""
    for start in range(0, max(len(text), 1), DELTA_CHARS):
        yield text[start : start + DELTA_CHARS]


def _sse_events(reply: Reply, body: dict[str, Any], *, partial: bool = False) -> list[tuple[str, dict[str, Any]]]:
    msg = _message(reply, body)
    usage = msg["usage"]
    start = dict(msg, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    events.append(("ping", {"type": "ping"}))
    for i, block in enumerate(reply.content):
        kind = block.get("type")
        if kind == "text":
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                )
            )
            events += [
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": piece}},
                )
                for piece in _pieces(block["text"])
            ]
        elif kind == "tool_use":
            head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": head}))
            events += [
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                )
                for piece in _pieces(json.dumps(block["input"]))
            ]
        elif kind == "thinking":
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": i, "content_block": {"type": "thinking", "thinking": ""}},
                )
            )
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "thinking_delta", "thinking": block["thinking"]},
                    },
                )
            )
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "signature_delta", "signature": block.get("signature", "sig")},
                    },
                )
            )
        if partial:
            return events
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _make_handler(fake: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "fake-anthropic/1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

        def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", "req_fake_" + uuid.uuid4().hex[:12])
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _send_error(self, status: int, etype: str, message: str, headers: dict[str, str] | None = None) -> None:
            self._send_json(status, {"type": "error", "error": {"type": etype, "message": message}}, headers)

        def do_GET(self) -> None:
            self._send_error(404, "not_found_error", f"fake API serves POST /v1/messages only, not {self.path}")

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not self.path.startswith("/v1/messages") or self.path.startswith("/v1/messages/count_tokens"):
                self._send_error(404, "not_found_error", f"fake API does not serve {self.path}")
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send_error(400, "invalid_request_error", "request body is not JSON")
                return
            headers = {k.lower(): v for k, v in self.headers.items() if k.lower() not in SECRET_HEADERS}
            request = fake._log(self.path, body, headers)
            if fake.strict:
                problem = tool_pairing_error(request.messages)
                if problem:
                    request.reply_kind = "reject:400"
                    self._send_error(400, "invalid_request_error", problem)
                    return
            try:
                reply = fake._take(request)
            except NoScriptedReply as exc:
                request.reply_kind = "reject:no-script"
                self._send_error(400, "invalid_request_error", str(exc))
                return
            if reply.hold is not None:
                while not reply.hold.wait(0.05):
                    if fake._stopping.is_set():
                        request.reply_kind = "drop:stopped"
                        self._drop()
                        return
            if reply.delay_s and fake._stopping.wait(reply.delay_s):
                # The server went down while this answer was on its way: it never arrives.
                request.reply_kind = "drop:stopped"
                self._drop()
                return
            self._answer(request, reply, body)

        def _answer(self, request: Request, reply: Reply, body: dict[str, Any]) -> None:
            request.reply_kind = reply.kind if reply.kind != "error" else f"error:{reply.status}"
            if reply.kind == "error":
                self._send_error(reply.status, reply.error_type, reply.message, reply.headers)
            elif reply.kind == "hang":
                fake._stopping.wait(reply.seconds)
                self.close_connection = True
            elif reply.kind == "drop":
                self._drop()
            elif request.stream:
                self._stream(reply, body, partial=reply.kind == "drop_mid_stream")
            else:
                if reply.kind == "drop_mid_stream":
                    self._drop()
                    return
                self._send_json(200, _message(reply, body), reply.headers)

        def _drop(self) -> None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        def _stream(self, reply: Reply, body: dict[str, Any], *, partial: bool) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("request-id", "req_fake_" + uuid.uuid4().hex[:12])
            self.send_header("connection", "close")
            for k, v in reply.headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.close_connection = True
            for event, data in _sse_events(reply, body, partial=partial):
                self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
            if partial:
                self._drop()

    return Handler
