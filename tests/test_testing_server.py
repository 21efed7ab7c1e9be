"""The fake Anthropic API: a product feature, so it is tested like one."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from flower_magic.testing import (
    FakeAnthropic,
    Reply,
    drop,
    error,
    hang,
    text,
    tool_pairing_error,
    tool_use,
    tool_uses,
)
from flower_magic.testing.server import DELTA_CHARS


def _post(api: FakeAnthropic, body: dict[str, Any], *, key: str = "secret-key-123", timeout: float = 5) -> Any:
    req = urllib.request.Request(
        api.url + "/v1/messages?beta=true",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-api-key": key, "authorization": f"Bearer {key}"},
        method="POST",
    )
    return urllib.request.urlopen(req, timeout=timeout)


def _body(text_: str = "hi", *, stream: bool = False, messages: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"model": "m", "stream": stream, "messages": messages or [{"role": "user", "content": text_}]}


def test_json_reply_and_log_without_credentials() -> None:
    with FakeAnthropic([text("hello", usage={"input_tokens": 7})]) as api:
        with _post(api, _body("question")) as resp:
            data = json.loads(resp.read())
        assert data["content"] == [{"type": "text", "text": "hello"}]
        assert data["stop_reason"] == "end_turn" and data["usage"]["input_tokens"] == 7
        (req,) = api.requests
        assert req.last_user_text == "question" and req.reply_kind == "message"
        assert "x-api-key" not in req.headers and "authorization" not in req.headers
        assert "secret-key-123" not in json.dumps(req.to_dict())


def test_streamed_tool_use_is_valid_sse() -> None:
    with FakeAnthropic([tool_use("Bash", {"command": "ls"}, say="looking")]) as api:
        with _post(api, _body(stream=True)) as resp:
            assert resp.headers["content-type"] == "text/event-stream"
            raw = resp.read().decode()
    events = [line.split(": ", 1)[1] for line in raw.splitlines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    datas = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]
    partial = [d["delta"]["partial_json"] for d in datas if d.get("delta", {}).get("type") == "input_json_delta"]
    assert json.loads(partial[0]) == {"command": "ls"}
    assert datas[-2]["delta"]["stop_reason"] == "tool_use"


def test_a_long_answer_streams_in_deltas_that_join_to_the_whole() -> None:
    """Megabytes go out as the real API sends them, in many small deltas (one 70 MB delta takes the
    CLI twice as long to read); short answers are still one delta."""
    long_text = "".join(f"{i:07d}\n" for i in range(DELTA_CHARS // 2 + 1))  # four deltas and a bit
    content = {"path": "data.csv", "content": long_text}
    with FakeAnthropic([text(long_text), tool_use("Write", content), text("short")]) as api:
        streamed = []
        for _ in range(3):
            with _post(api, _body(stream=True)) as resp:
                raw = resp.read().decode()
            datas = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]
            streamed.append([d["delta"] for d in datas if d["type"] == "content_block_delta"])
    texts, inputs, short = streamed
    assert len(texts) == 5 and all(len(d["text"]) <= DELTA_CHARS for d in texts)
    assert "".join(d["text"] for d in texts) == long_text
    assert len(inputs) > 1 and json.loads("".join(d["partial_json"] for d in inputs)) == content
    assert [d["text"] for d in short] == ["short"]


def test_errors_matching_and_exhaustion() -> None:
    script = [error(529), text("for judges", match="判定"), text("anything")]
    with FakeAnthropic(script) as api:
        with pytest.raises(urllib.error.HTTPError) as info:
            _post(api, _body("x"))
        assert info.value.code == 529
        assert json.loads(info.value.read())["error"]["type"] == "overloaded_error"
        with _post(api, _body("请判定")) as resp:
            assert json.loads(resp.read())["content"][0]["text"] == "for judges"
        with _post(api, _body("x")) as resp:
            assert json.loads(resp.read())["content"][0]["text"] == "anything"
        with pytest.raises(urllib.error.HTTPError) as info:
            _post(api, _body("x"))
        assert info.value.code == 400 and b"no scripted reply" in info.value.read()
        assert [r.reply_kind for r in api.requests] == ["error:529", "message", "message", "reject:no-script"]


def test_times_none_and_callable_default() -> None:
    with FakeAnthropic(
        [text("again", times=None, match="loop")], default=lambda r: text(r.last_user_text[::-1])
    ) as api:
        for _ in range(3):
            with _post(api, _body("loop")) as resp:
                assert json.loads(resp.read())["content"][0]["text"] == "again"
        with _post(api, _body("abc")) as resp:
            assert json.loads(resp.read())["content"][0]["text"] == "cba"


def test_unpaired_tool_use_is_rejected_like_the_real_api() -> None:
    dangling = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
        {"role": "user", "content": "continue"},
    ]
    assert "t1" in (tool_pairing_error(dangling) or "")
    stray = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz", "content": "x"}]}]
    assert "zz" in (tool_pairing_error(stray) or "")
    paired = [*dangling[:2], {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": ""}]}]
    assert tool_pairing_error(paired) is None
    with FakeAnthropic([text("never")]) as api:
        with pytest.raises(urllib.error.HTTPError) as info:
            _post(api, _body(messages=dangling))
        assert info.value.code == 400 and b"tool_use" in info.value.read()
        assert api.pending()  # the reply was not consumed
    assert FakeAnthropic(strict=False).strict is False


def test_stop_refuses_connections_and_start_reuses_the_port() -> None:
    api = FakeAnthropic([text("one"), text("two")]).start()
    port = api.port
    with _post(api, _body()) as resp:
        resp.read()
    api.stop()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    api.start()
    try:
        assert api.port == port
        with _post(api, _body()) as resp:
            assert json.loads(resp.read())["content"][0]["text"] == "two"
    finally:
        api.stop()


def test_hang_ends_when_the_server_stops_and_drop_closes() -> None:
    api = FakeAnthropic([drop(), hang(3600)]).start()
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        _post(api, _body())
    with pytest.raises((TimeoutError, OSError)):
        _post(api, _body(), timeout=0.5)
    hanging = [t for t in threading.enumerate() if "process_request" in t.name and t.is_alive()]
    assert hanging, "the hang is not being answered on a server thread"
    api.stop()
    assert [r.reply_kind for r in api.requests] == ["drop", "hang"]
    # stop() ended the hour-long hang: its thread finishes (a bounded join keeps a bug from hanging CI).
    for thread in hanging:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in hanging)


def test_reply_round_trips_through_json() -> None:
    reply = tool_uses([("Read", {"file_path": "a"}), ("Read", {"file_path": "b"})], delay_s=0.1)
    again = Reply.from_dict(json.loads(json.dumps(reply.to_dict())))
    assert again.content == reply.content and again.delay_s == 0.1
    with pytest.raises(ValueError, match="unknown reply field"):
        Reply.from_dict({"kind": "message", "bogus": 1})


def test_command_line_server(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([text("scripted").to_dict()]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "flower_magic.testing", "--script", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        url = first.split(" on ")[1].split()[0]
        req = urllib.request.Request(url + "/v1/messages", data=json.dumps(_body("hey")).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert json.loads(resp.read())["content"][0]["text"] == "scripted"
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert "you said: hey" in json.loads(resp.read())["content"][0]["text"]
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
