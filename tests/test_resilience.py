"""classify, endpoint, reachable, Resilience: the pure parts of riding out an outage."""

from __future__ import annotations

import logging
import random
import socket
import threading
from collections.abc import Iterator

import anyio
import pytest

from flower_magic.core.resilience import (
    CLI_MAX_RETRIES,
    FATAL,
    RESUME_PROMPT,
    SDK_READER_LOGGER,
    Resilience,
    classify,
    cli_retry_env,
    endpoint,
    fatal_hint,
    human_wait,
    is_too_big,
    quiet_sdk_reader,
    reachable,
)

GATEWAY_TAIL = (
    "This is a server-side issue, usually temporary — try again in a moment. "
    "If it persists, check your inference gateway (127.0.0.1:{port})."
)

CLASSIFY_TABLE: list[tuple[str | None, str]] = [
    # sdk-notes A5: every synthetic text the CLI 2.1.332 wrote
    ("API Error: Connection refused — a firewall or proxy may be blocking it (ECONNREFUSED)", "transient"),
    (
        "API Error: Connection dropped (ECONNRESET). Check the gateway set in ANTHROPIC_BASE_URL, then try again.",
        "transient",
    ),
    ("API Error: 529 Overloaded. " + GATEWAY_TAIL.format(port=38123), "transient"),
    ("API Error: 500 Internal server error. " + GATEWAY_TAIL.format(port=38123), "transient"),
    (
        "API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit",
        "transient",
    ),
    ("Invalid API key · Fix external API key", "fatal"),
    ("API Error: 400 messages: bad thing", "fatal"),
    (
        "Request timed out. If the API is slow to answer, or a proxy or gateway holds responses, "
        "set API_TIMEOUT_MS above 3000.",
        "transient",
    ),
    # sdk-notes A5: the CLI's connection-error wordings, per code
    ("API Error: Connection dropped (EPIPE)", "transient"),
    ("API Error: Connection dropped (ECONNABORTED)", "transient"),
    ("API Error: Connection dropped (ConnectionClosed)", "transient"),
    ("API Error: Connection dropped (ERR_SOCKET_CLOSED)", "transient"),
    ("API Error: Connection dropped (UND_ERR_SOCKET)", "transient"),
    ("API Error: Connection dropped (Malformed_HTTP_Response)", "transient"),
    ("API Error: Connection refused — a firewall or proxy may be blocking it (ConnectionRefused)", "transient"),
    ("API Error: Can't reach the API server — check your internet or DNS (ENOTFOUND)", "transient"),
    ("API Error: Can't reach the API server — check your internet or DNS (EAI_AGAIN)", "transient"),
    ("API Error: Can't reach the API server — check your internet or DNS (FailedToOpenSocket)", "transient"),
    ("API Error: No internet route — check your connection or VPN (ENETUNREACH)", "transient"),
    ("API Error: No internet route — check your connection or VPN (EHOSTDOWN)", "transient"),
    ("API Error: Unable to connect to API (EWHATEVER)", "transient"),
    ("No internet route — check your connection or VPN", "transient"),
    # a proxy refusing the tunnel may be configuration: not known to be waitable (still retried as unknown)
    ("API Error: Couldn't connect through your proxy (ERR_PROXY_TUNNEL) — the proxy refused the tunnel: 4", "unknown"),
    # retry-event texts (system/api_error "formatted", api_retry error names)
    ("529 Overloaded", "transient"),
    ("Connection error.", "transient"),
    ('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"status":529}', "transient"),
    ("rate_limit_error: slow down", "transient"),
    ("502 Bad Gateway", "transient"),
    ("503 Service Unavailable", "transient"),
    ("504 Gateway Timeout", "transient"),
    ("Too Many Requests", "transient"),
    ("ETIMEDOUT", "transient"),
    ("request to https://api.anthropic.com/v1/messages failed, reason: socket hang up", "transient"),
    ("TypeError: fetch failed", "transient"),
    ("the service is temporarily unavailable", "transient"),
    # fatal before transient: a 401 that talks about the connection must not wait forever
    ("401 Unauthorized: connection rejected by the gateway", "fatal"),
    ("API Error: 401 authentication_error · connection closed (ECONNRESET)", "fatal"),
    ("403 Forbidden: permission denied (timeout)", "fatal"),
    ("API Error: 404 not_found_error: model: claude-nonexistent", "fatal"),
    ("invalid_request_error: messages.1: tool_use ids must be unique", "fatal"),
    ("Your credit balance is too low to access the Anthropic API", "fatal"),
    ("billing_error", "fatal"),
    ("authentication_failed", "fatal"),
    ("Reached maximum budget ($5.00)", "fatal"),
    ("error_max_turns: Reached max_turns (12)", "fatal"),
    ("CLINotFoundError: Claude Code not found", "fatal"),
    ("quota exceeded for this organisation", "fatal"),
    ("API Error: 401 Unauthorized. " + GATEWAY_TAIL.format(port=529), "fatal"),
    # the port-number pitfall: a gateway on port 400/401/403/404 must not make an overload fatal
    ("API Error: 529 Overloaded. " + GATEWAY_TAIL.format(port=400), "transient"),
    ("API Error: 529 Overloaded. " + GATEWAY_TAIL.format(port=401), "transient"),
    ("API Error: 529 Overloaded. " + GATEWAY_TAIL.format(port=403), "transient"),
    ("API Error: 529 Overloaded. " + GATEWAY_TAIL.format(port=404), "transient"),
    ("API Error: 500 Internal server error. " + GATEWAY_TAIL.format(port=400), "transient"),
    ("API Error: 500 Internal server error. " + GATEWAY_TAIL.format(port=401), "transient"),
    ("API Error: 500 Internal server error. " + GATEWAY_TAIL.format(port=403), "transient"),
    ("API Error: 500 Internal server error. " + GATEWAY_TAIL.format(port=404), "transient"),
    ("API Error: 529 Overloaded. check your inference gateway (gateway:401).", "transient"),
    ("529 from gw.example.com:403", "transient"),
    ("529 from [::1]:404", "transient"),
    ("529 from localhost:400", "transient"),
    ("POST http://127.0.0.1:401/v1/messages returned 503", "transient"),
    ("POST https://gw.example.com:404/v1/messages: overloaded", "transient"),
    # unknown: nothing to go on, and numbers that are not statuses
    (None, "unknown"),
    ("", "unknown"),
    ("KeyError: 'session_id'", "unknown"),
    ("claude 2.1.404 exited", "unknown"),
    ("error code 4010", "unknown"),
    ("listening on 127.0.0.1:5290", "unknown"),
]


@pytest.mark.parametrize(("text", "kind"), CLASSIFY_TABLE)
def test_classify(text: str | None, kind: str) -> None:
    assert classify(text) == kind


def test_a_message_past_the_read_limit_is_fatal_with_a_hint() -> None:
    """Regression: the SDK's "exceeded maximum buffer size" was "unknown", so the step was retried
    under the "you were interrupted" prompt at many times the cost."""
    sdk = "CLIJSONDecodeError: Failed to decode JSON: JSON message exceeded maximum buffer size of 67108864 bytes..."
    assert classify(sdk) == FATAL and is_too_big(sdk)
    assert "64 MiB" in fatal_hint(sdk) and "run flower again" in fatal_hint(sdk)
    assert not is_too_big("API Error: 529 Overloaded") and not is_too_big(None)


def test_the_sdks_own_read_limit_log_line_is_muted_and_nothing_else(caplog: pytest.LogCaptureFixture) -> None:
    """The front end says it in one line; the SDK's log line would be a second, unexplained one."""
    quiet_sdk_reader()
    quiet_sdk_reader()
    logger = logging.getLogger(SDK_READER_LOGGER)
    assert len(logger.filters) == 1
    with caplog.at_level(logging.DEBUG, logger=SDK_READER_LOGGER):
        logger.error("Fatal error in message reader: Failed to decode JSON: JSON message exceeded maximum buffer size")
        logger.error("Fatal error in message reader: something else")
    assert [r.getMessage() for r in caplog.records] == ["Fatal error in message reader: something else"]


def test_classify_table_is_large() -> None:
    assert len(CLASSIFY_TABLE) >= 40


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        (None, ("api.anthropic.com", 443)),
        ("", ("api.anthropic.com", 443)),
        ("   ", ("api.anthropic.com", 443)),
        ("https://api.anthropic.com", ("api.anthropic.com", 443)),
        ("http://127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("http://127.0.0.1:8080/", ("127.0.0.1", 8080)),
        ("http://localhost", ("localhost", 80)),
        ("https://gw.example.com", ("gw.example.com", 443)),
        ("https://gw.example.com/prefix/v1/", ("gw.example.com", 443)),
        ("gw.example.com:9000", ("gw.example.com", 9000)),
        ("localhost:8080", ("localhost", 8080)),
        ("gw.example.com", ("gw.example.com", 443)),
        ("HTTP://GW.Example.COM", ("gw.example.com", 80)),
        ("http://[::1]:3000/v1", ("::1", 3000)),
        ("http://gw.example.com:notaport", ("gw.example.com", 80)),
        ("https://", ("api.anthropic.com", 443)),
    ],
)
def test_endpoint(base_url: str | None, expected: tuple[str, int]) -> None:
    environ = {} if base_url is None else {"ANTHROPIC_BASE_URL": base_url}
    assert endpoint(environ) == expected


def test_endpoint_reads_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:4242")
    assert endpoint() == ("127.0.0.1", 4242)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    try:
        yield srv
    finally:
        srv.close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_reachable_listening_port_and_nothing_is_sent(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    assert anyio.run(reachable, "127.0.0.1", port, 5.0) is True
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(5.0)
        assert conn.recv(1024) == b""  # the probe closed without sending a byte


def test_reachable_by_name(listener: socket.socket) -> None:
    assert anyio.run(reachable, "localhost", listener.getsockname()[1], 5.0) is True


def test_reachable_closed_port() -> None:
    assert anyio.run(reachable, "127.0.0.1", _free_port(), 5.0) is False


def test_reachable_unresolvable_name() -> None:
    assert anyio.run(reachable, "no-such-host.invalid", 443, 2.0) is False


def test_reachable_zero_timeout_is_false_not_an_exception(listener: socket.socket) -> None:
    assert anyio.run(reachable, "127.0.0.1", listener.getsockname()[1], 0.0) is False


def test_wait_online_up_at_first_probe_says_nothing(listener: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{listener.getsockname()[1]}")
    said: list[str] = []
    assert anyio.run(Resilience(probe_interval=0.01).wait_online, said.append) is True
    assert said == []


def test_wait_online_waits_for_a_port_that_opens_later(monkeypatch: pytest.MonkeyPatch) -> None:
    port = _free_port()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def open_port() -> None:
        srv.bind(("127.0.0.1", port))
        srv.listen(4)

    # The port opens a little after the first failed probe is reported, so the order of events does
    # not depend on how fast this machine is.
    timer = threading.Timer(0.2, open_port)
    said: list[str] = []

    def notify(msg: str) -> None:
        said.append(msg)
        if len(said) == 1:
            timer.start()

    try:
        res = Resilience(probe_interval=0.02, probe_timeout=1.0, max_offline_wait=60.0)
        assert anyio.run(res.wait_online, notify) is True
    finally:
        timer.cancel()
        if timer.is_alive():
            timer.join()
        srv.close()
    assert said == [
        f"127.0.0.1:{port} 不可达,等待恢复(最多 1 分钟)",
        f"127.0.0.1:{port} 恢复,继续",
    ]


def test_wait_online_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    port = _free_port()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    said: list[str] = []
    res = Resilience(probe_interval=0.01, probe_timeout=1.0, max_offline_wait=0.1)
    assert anyio.run(res.wait_online, said.append) is False
    assert said == [f"127.0.0.1:{port} 不可达,等待恢复(最多 0 秒)"]


def test_wait_online_without_notify(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{_free_port()}")
    assert anyio.run(Resilience(probe_interval=0.01, max_offline_wait=0.0).wait_online) is False


@pytest.mark.parametrize(
    ("attempt", "nominal"),
    [(0, 4.0), (1, 4.0), (2, 8.0), (3, 16.0), (4, 32.0), (5, 64.0), (6, 120.0), (7, 120.0), (10_000, 120.0)],
)
def test_delay_for_doubles_up_to_the_cap(attempt: int, nominal: float) -> None:
    assert Resilience(rand=lambda: 0.5).delay_for(attempt) == pytest.approx(nominal)
    assert Resilience(rand=lambda: 0.0).delay_for(attempt) == pytest.approx(nominal * 0.75)
    assert Resilience(rand=lambda: 1.0).delay_for(attempt) == pytest.approx(nominal * 1.25)


def test_delay_for_jitter_stays_within_a_quarter() -> None:
    res = Resilience(base_delay=2.0, max_delay=30.0, rand=random.Random(7).random)
    for attempt in range(1, 9):
        nominal = min(2.0 * 2 ** (attempt - 1), 30.0)
        delays = [res.delay_for(attempt) for _ in range(200)]
        assert all(nominal * 0.75 <= d <= nominal * 1.25 for d in delays)
        assert len(set(delays)) > 1  # it does jitter


@pytest.mark.parametrize(
    ("kind", "retry_unknown", "expected"),
    [
        ("transient", True, True),
        ("transient", False, True),
        ("unknown", True, True),
        ("unknown", False, False),
        ("fatal", True, False),
        ("fatal", False, False),
    ],
)
def test_should_retry(kind: str, retry_unknown: bool, expected: bool) -> None:
    assert Resilience(retry_unknown=retry_unknown).should_retry(kind) is expected


def test_defaults() -> None:
    res = Resilience()
    assert (res.enabled, res.max_attempts, res.base_delay, res.max_delay) == (True, 6, 4.0, 120.0)
    assert (res.probe_timeout, res.probe_interval, res.max_offline_wait) == (5.0, 15.0, 3600.0)
    assert res.retry_unknown is True
    assert res.resume_prompt == RESUME_PROMPT


def test_resume_prompt_is_neutral() -> None:
    """The resumed model must not start discussing the outage: no error detail in the prompt."""
    for word in ("Error", "ECONN", "API", "529", "网络", "错误", "超时"):
        assert word not in RESUME_PROMPT
    assert "接着" in RESUME_PROMPT and "不要从头" in RESUME_PROMPT


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 秒"), (5, "5 秒"), (59, "59 秒"), (60, "1 分钟"), (90, "2 分钟"), (600, "10 分钟"), (3600, "60 分钟")],
)
def test_human_wait(seconds: float, text: str) -> None:
    assert human_wait(seconds) == text


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, {"CLAUDE_CODE_MAX_RETRIES": str(CLI_MAX_RETRIES)}),
        ({"CLAUDE_CODE_MAX_RETRIES": ""}, {"CLAUDE_CODE_MAX_RETRIES": str(CLI_MAX_RETRIES)}),
        ({"CLAUDE_CODE_MAX_RETRIES": "5"}, {}),
        ({"CLAUDE_CODE_MAX_RETRIES": "0"}, {}),
        ({"OTHER": "1"}, {"CLAUDE_CODE_MAX_RETRIES": str(CLI_MAX_RETRIES)}),
    ],
)
def test_cli_retry_env(environ: dict[str, str], expected: dict[str, str]) -> None:
    assert cli_retry_env(environ) == expected


def test_cli_retry_env_reads_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "7")
    assert cli_retry_env() == {}
    monkeypatch.delenv("CLAUDE_CODE_MAX_RETRIES")
    assert cli_retry_env() == {"CLAUDE_CODE_MAX_RETRIES": str(CLI_MAX_RETRIES)}


def test_cli_retry_budget_gives_up_within_seconds() -> None:
    """The CLI's own back-off (~0.5 s * 2**k, +25 % jitter at most) must end long before ours starts."""
    worst_case_s = sum(0.5 * 2**k * 1.25 for k in range(CLI_MAX_RETRIES))
    assert CLI_MAX_RETRIES >= 1 and worst_case_s < 5.0
