"""Outage resilience: tell waitable failures from fatal ones, probe the endpoint, back off.

The Runtime calls ``classify`` on an attempt's error text; for a retryable kind it calls
``Resilience.wait_online`` (which probes the API endpoint until it answers a TCP handshake), then
sleeps ``delay_for(attempt)`` and resumes the same session with ``resume_prompt``. A stop ends either
wait at once: the runtime cancels it (``Runtime._unless_stopped``); words said meanwhile go with the
resume prompt.

Guarantees:
    - ``classify`` checks FATAL before TRANSIENT: a 401 text that also says "connection" must stop the
      run, not wait forever.
    - Status numbers are never read out of a ``host:port`` or a URL: the CLI's 529/500 texts embed
      the gateway address (``check your inference gateway (127.0.0.1:400)``), and a gateway on port
      400 must not turn an overload into a fatal error.
    - ``reachable`` resolves the name and opens at most one TCP connection, which it closes without
      sending a byte: no HTTP, no credentials, no cost. Any failure is "unreachable", never an
      exception.
    - ``resume_prompt`` carries no error detail: the model needs "you were interrupted, go on", not
      whether it was ENOTFOUND or a 503.
    - ``wait_online`` can be cancelled at any await (a stop during an outage): a name lookup under way
      is abandoned, not waited for (its thread ends on its own).
Not guaranteed:
    - That a reachable endpoint serves requests: a TCP handshake says the network is back, not that
      the gateway is healthy. The back-off and the attempt budget cover the rest.
"""

from __future__ import annotations

import logging
import os
import random
import re
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

import anyio
import anyio.to_thread

from flower_magic.core.agent import MAX_MESSAGE_BYTES

Kind = Literal["transient", "fatal", "unknown"]

TRANSIENT: Kind = "transient"
FATAL: Kind = "fatal"
UNKNOWN: Kind = "unknown"

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_HOST = "api.anthropic.com"

# The bundled CLI retries every failed request itself, about 0.5 s * 2**k (+ jitter) apart, capped
# near 32 s (sdk-notes B-c). Its default of 10 retries takes ~189 s to give up on a closed port, and
# our outer loop then waits its own back-off on top: minutes of silence with nobody told why. With
# 2 retries (~0.55 s + ~1.1 s, ~2.4 s in all) the CLI still rides out a single dropped packet or a
# one-off 529, then hands the failure to us; the outer loop probes the endpoint, tells the person
# it is waiting, and resumes the session when the network is back. 0 would turn every blip into a
# full resume (a new CLI process and a reloaded transcript), which costs more than two quick retries.
CLI_MAX_RETRIES = 2
CLI_MAX_RETRIES_ENV = "CLAUDE_CODE_MAX_RETRIES"

# Status numbers become meaningless inside an address: strip URLs, the CLI's "(inference gateway
# (<addr>))" hint and anything that looks like host:port before looking for 400 or 529.
_URL_RE = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s)\]>\"']+", re.IGNORECASE)
_GATEWAY_HINT_RE = re.compile(r"inference gateway\s*\([^)]*\)", re.IGNORECASE)
_HOST_PORT_RE = re.compile(
    r"(?:\[[0-9a-f:.]+\]"  # [::1]
    r"|\b\d{1,3}(?:\.\d{1,3}){3}"  # 127.0.0.1
    r"|\blocalhost"
    r"|\b(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z][a-z0-9-]*)"  # gateway.example.com
    r":\d{1,5}\b",
    re.IGNORECASE,
)


def _status(*codes: int) -> str:
    # A status number standing on its own: not part of a longer number, a version or a word.
    alt = "|".join(str(c) for c in codes)
    return rf"(?<![\w.])(?:{alt})(?!\w|\.\d)"


# The SDK's words when one line of the CLI's output is longer than ``max_buffer_size``
# (``MAX_MESSAGE_BYTES``). The SDK stops reading there while the CLI goes on with the turn unseen (a
# Write may be on disk already), so resuming with "you were interrupted" would tell the model a false
# story at many times the cost: the step stops and says why; the next run resumes its session.
_TOO_BIG_RE = re.compile(r"exceeded maximum buffer size", re.IGNORECASE)
SDK_READER_LOGGER = "claude_agent_sdk._internal.query"  # where the SDK logs it
# Where the SDK logs a transcript batch the store refused; the runtime says it itself ("! session store: …").
SDK_MIRROR_LOGGER = "claude_agent_sdk._internal.transcript_mirror_batcher"
_MIRROR_FAILED = "[TranscriptMirrorBatcher] flush failed"

_FATAL_RE = re.compile(
    "|".join(
        [
            _TOO_BIG_RE.pattern,
            _status(400, 401, 403, 404),
            r"invalid.?api.?key",
            r"authentication",
            r"unauthorized",
            r"forbidden",
            r"permission denied",
            r"invalid_request",
            r"billing",
            r"credit balance",
            r"quota exceeded",
            r"budget",
            r"max_turns",
            r"maximum number of turns",
            r"CLINotFound",
        ]
    ),
    re.IGNORECASE,
)

_TRANSIENT_RE = re.compile(
    "|".join(
        [
            r"ENOTFOUND",
            r"EAI_AGAIN",
            r"ECONNRESET",
            r"ECONNREFUSED",
            r"ECONNABORTED",
            r"ETIMEDOUT",
            r"EPIPE",
            r"EHOSTUNREACH",
            r"EHOSTDOWN",
            r"ENETDOWN",
            r"ENETUNREACH",
            r"ConnectionRefused",
            r"ConnectionClosed",
            r"ERR_SOCKET_CLOSED",
            r"UND_ERR_SOCKET",
            r"FailedToOpenSocket",
            r"socket hang up",
            r"fetch failed",
            r"network error",
            r"Connection error",
            r"Connection refused",
            r"Connection dropped",
            r"Can't reach the API server",
            r"No internet route",
            r"Unable to connect to API",
            _status(429, 500, 502, 503, 504, 529),
            r"overloaded",
            r"rate.?limit",
            r"too many requests",
            r"timeout",
            r"timed out",
            r"temporarily unavailable",
            r"service unavailable",
            r"internal server error",
        ]
    ),
    re.IGNORECASE,
)


def _scrub_addresses(text: str) -> str:
    text = _URL_RE.sub(" ", text)
    text = _GATEWAY_HINT_RE.sub(" ", text)
    return _HOST_PORT_RE.sub(" ", text)


# What to do about a fatal error, by what it says; first match wins.
_FATAL_HINTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        _TOO_BIG_RE,
        f"one message from Claude Code was larger than flower reads ({MAX_MESSAGE_BYTES // 2**20} MiB); the "
        "step stopped and its session is kept: run flower again to continue, and ask for large data in "
        "smaller files",
    ),
    (
        re.compile(r"invalid.?api.?key|authentication|unauthorized|forbidden|" + _status(401, 403), re.IGNORECASE),
        "the API refused the credentials: check ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN with "
        "ANTHROPIC_BASE_URL for a gateway), or log in again with `claude login`",
    ),
    (
        re.compile(r"credit balance|billing|quota exceeded", re.IGNORECASE),
        "the account has no credit or quota left: top it up, or use another key",
    ),
    (re.compile(r"budget", re.IGNORECASE), "the step reached its max_budget_usd; raise it in the AgentSpec"),
    (re.compile(r"max_turns|maximum number of turns", re.IGNORECASE), "the step reached its max_turns limit"),
    (
        re.compile(r"not.?found|" + _status(404), re.IGNORECASE),
        "the endpoint or model was not found: check ANTHROPIC_BASE_URL and ANTHROPIC_MODEL",
    ),
    (
        re.compile(r"invalid_request|" + _status(400), re.IGNORECASE),
        "the API rejected the request as invalid (400); if it names a model or a setting, fix that, "
        "otherwise keep runs/manifest.json and report it",
    ),
)


def fatal_hint(text: str | None) -> str:
    """What the person should do about a fatal error (empty when nothing specific applies)."""
    cleaned = _scrub_addresses(text or "")
    for pattern, hint in _FATAL_HINTS:
        if pattern.search(cleaned):
            return hint
    return ""


def is_too_big(text: str | None) -> bool:
    """Whether an error says one message of the CLI's output was past the SDK's read limit."""
    return bool(text and _TOO_BIG_RE.search(text))


class _SaidElsewhere(logging.Filter):
    """Drops the SDK's own log line about a message past the read limit (see ``quiet_sdk_reader``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (is_too_big(text) or text.startswith(_MIRROR_FAILED))


def quiet_sdk_reader() -> None:
    """Mute the SDK's "Fatal error in message reader: ... exceeded maximum buffer size" log line, and
    its "[TranscriptMirrorBatcher] flush failed" line (the runtime's own notice says that one).

    The runtime records that failure in the step's manifest row and the front ends explain it in one
    line; the SDK's line (printed on stderr, in a notebook cell too) would be a second, unexplained one.
    Other messages of that logger pass. Idempotent.
    """
    for name in (SDK_READER_LOGGER, SDK_MIRROR_LOGGER):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _SaidElsewhere) for f in logger.filters):
            logger.addFilter(_SaidElsewhere())


def classify(text: str | None) -> Kind:
    """Say whether an error is worth waiting out.

    Args:
        text: the error text (a synthetic ``API Error: …`` message, an exception string, …).

    Returns:
        ``"fatal"`` for what a retry cannot fix (bad key, bad request, budget, a message past the read
        limit), ``"transient"`` for network trouble, overload and rate limits, ``"unknown"`` otherwise
        (also for empty text).
    """
    if not text:
        return UNKNOWN
    scrubbed = _scrub_addresses(text)
    if _FATAL_RE.search(scrubbed):
        return FATAL
    if _TRANSIENT_RE.search(scrubbed):
        return TRANSIENT
    return UNKNOWN


def endpoint(environ: Mapping[str, str] | None = None) -> tuple[str, int]:
    """Return the ``(host, port)`` the CLI talks to, following ``ANTHROPIC_BASE_URL``.

    With a gateway it is the gateway that must be probed: api.anthropic.com being up says nothing
    about it.

    Args:
        environ: where to read ``ANTHROPIC_BASE_URL``; defaults to ``os.environ``.

    Returns:
        The host (``api.anthropic.com`` when unset or empty) and the explicit port, else 80 for
        ``http`` and 443 otherwise. A URL without a scheme is read as ``https``.
    """
    if environ is None:
        environ = os.environ
    url = (environ.get("ANTHROPIC_BASE_URL") or "").strip() or DEFAULT_BASE_URL
    if "://" not in url:
        url = "https://" + url
    parts = urlsplit(url)
    host = parts.hostname or DEFAULT_HOST
    try:
        explicit = parts.port
    except ValueError:
        explicit = None
    if explicit:
        return host, explicit
    return host, 80 if parts.scheme == "http" else 443


async def reachable(host: str, port: int, timeout: float = 5.0) -> bool:
    """Probe ``host:port`` with a name lookup and one TCP handshake; send nothing.

    Args:
        host: a name or an IP address.
        port: the TCP port.
        timeout: seconds for the lookup and the connection together.

    Returns:
        True when a connection was established (and closed at once), False on any failure.
    """
    try:
        with anyio.fail_after(timeout):
            # getaddrinfo blocks; a hung resolver must not outlive the timeout, so the thread is
            # abandoned rather than waited for.
            infos = await anyio.to_thread.run_sync(
                socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM, abandon_on_cancel=True
            )
            addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
            for address in addresses:
                try:
                    stream = await anyio.connect_tcp(address, port)
                except OSError:
                    continue
                await stream.aclose()
                return True
    except Exception:
        return False
    return False


def human_wait(seconds: float, lang: str = "zh") -> str:
    """Render a wait for people: ``"45 秒"`` under a minute, else ``"60 分钟"`` (``45 s``, ``60 min``)."""
    from flower_magic.core.words import pick_lang_or_default, say

    lang = pick_lang_or_default(lang)
    if seconds < 60:
        return say("wait_seconds", lang, n=f"{seconds:.0f}")
    return say("wait_minutes", lang, n=f"{seconds / 60:.0f}")


def cli_retry_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The CLI retry budget to put in the agent's environment.

    Args:
        environ: the user's environment; defaults to ``os.environ``.

    Returns:
        ``{"CLAUDE_CODE_MAX_RETRIES": "<CLI_MAX_RETRIES>"}``, or ``{}`` when the user already set the
        variable to something non-blank (their choice wins).
    """
    if environ is None:
        environ = os.environ
    if (environ.get(CLI_MAX_RETRIES_ENV) or "").strip():
        return {}
    return {CLI_MAX_RETRIES_ENV: str(CLI_MAX_RETRIES)}


RESUME_PROMPT = "上一轮做到一半被打断了,没有做完。先看看磁盘上已经留下了什么,从停下的地方接着往下做,不要从头再来。"

# 2**62 * 4 s is far past any max_delay; the clamp only keeps the float arithmetic finite.
_MAX_EXPONENT = 62


@dataclass
class Resilience:
    """How a step rides out network trouble.

    Attributes:
        enabled: retry at all.
        max_attempts: attempts per step, the first included.
        base_delay: seconds of back-off after the first failure; doubles each time.
        max_delay: cap of the back-off in seconds (before jitter).
        probe_timeout: seconds allowed for one reachability probe.
        probe_interval: seconds between probes while the endpoint is down.
        max_offline_wait: seconds to wait for the endpoint before giving up.
        retry_unknown: also retry errors ``classify`` cannot place.
        resume_prompt: what a resumed session is told; deliberately without error details.
        rand: a source of floats in [0, 1) for the jitter; pass a seeded ``random.Random().random``
            or a constant in tests.
    """

    enabled: bool = True
    max_attempts: int = 6
    base_delay: float = 4.0
    max_delay: float = 120.0
    probe_timeout: float = 5.0
    probe_interval: float = 15.0
    max_offline_wait: float = 3600.0
    retry_unknown: bool = True
    resume_prompt: str = RESUME_PROMPT
    rand: Callable[[], float] = field(default=random.random, repr=False, compare=False)

    def delay_for(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based), with ±25 % jitter."""
        exponent = min(max(attempt, 1) - 1, _MAX_EXPONENT)
        base = min(self.base_delay * 2**exponent, self.max_delay)
        return float(base * (0.75 + self.rand() * 0.5))

    def should_retry(self, kind: str) -> bool:
        """Whether an error of this ``classify`` kind is worth another attempt."""
        return kind == TRANSIENT or (kind == UNKNOWN and self.retry_unknown)

    async def wait_online(self, notify: Callable[[str], None] | None = None, *, lang: str = "zh") -> bool:
        """Wait until the API endpoint accepts a TCP connection.

        Args:
            notify: told once when the endpoint is first found down
                (``endpoint_down`` in ``core.words``) and once when it is back (``endpoint_back``).
                Nothing is said when it is up at the first probe.
            lang: the language of those lines.

        Returns:
            True when the endpoint is reachable, False after ``max_offline_wait`` seconds without.
        """
        from flower_magic.core.words import pick_lang_or_default, say

        lang = pick_lang_or_default(lang)
        host, port = endpoint()
        deadline = time.monotonic() + self.max_offline_wait
        first = True
        while True:
            if await reachable(host, port, self.probe_timeout):
                if not first and notify is not None:
                    notify(say("endpoint_back", lang, host=host, port=port))
                return True
            if first and notify is not None:
                wait = human_wait(self.max_offline_wait, lang)
                notify(say("endpoint_down", lang, host=host, port=port, wait=wait))
            first = False
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await anyio.sleep(min(self.probe_interval, left))
