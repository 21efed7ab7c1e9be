"""Secrets, as flower recognises them: one redaction for everything the model is sent from a notebook
(``core.notebook``), everything the panel serves (``panel.redaction``) and everything the event log
writes (``core.live``).

A secret is found four ways:

- **by value**: the values of this process's own credentials (an environment variable whose name
  reads as one, whatever the value's shape: ``ANTHROPIC_AUTH_TOKEN=gw-…``), the password of any
  URL in the environment (``FLOWER_SESSIONS``) or of any session store this process parsed
  (``remember``), and the values a caller gives (a notebook variable that holds a password);
- **by shape**: Anthropic (``sk-ant-``), OpenAI (``sk-``, ``sk-proj-``), GitHub (``ghp_``, ``gho_``,
  ``github_pat_``…), Hugging Face (``hf_``), AWS (``AKIA``/``ASIA`` key ids and 40-character
  secret keys), Slack, Google, Stripe, GitLab and npm tokens, JWTs, ``Bearer …``, PEM private keys,
  and the password of any ``scheme://user:PASSWORD@host`` URL;
- **by name, in text**: the value given to a name that reads as a credential (``secret_name``) in
  code, ``.env`` lines, ``env`` output, JSON, YAML, reprs and headers: ``dbPassword = "…"``,
  ``API_KEY=…``, ``"Authorization": "Bearer …"``, ``Conn(password='…')``, ``X-Api-Key: …``;
- **by name, in data** (``walk``): every string under a mapping key that reads as a credential
  (``Authorization``, ``Cookie``, ``X-Api-Key``, ``password``), at any depth.

What is found is replaced by ``[redacted]``: the name, the quotes and the URL around it stay.

Guarantees:
- A value found by value is replaced wherever it occurs, also in its JSON-escaped spelling.
- ``walk`` returns a new structure and never changes what it is given; numbers, booleans and
  ``None`` are kept as they are (only strings are replaced).
- ``hits`` never says no for encoded data in which ``walk`` would change something: a body it
  passes is served as it is.

Not guaranteed:
- Values found by value shorter than ``MIN_SECRET_CHARS`` are left alone: replacing ``"1"``
  everywhere would wreck the data and protect nothing. (By name and by shape, any length.)
- A secret in prose ("my password is hunter2") that is in no variable, no environment and has no
  known shape is unknown here.
- The session store (``sessions.db``, PostgreSQL) keeps the conversation as the CLI wrote it, the
  output of an ``env`` the agent ran included: it is the record a resume replays, and the CLI keeps
  its own copy anyway. What is read from it for the panel is scrubbed; what the notebook gives the
  agent is scrubbed before it is sent, so the store never gets it.
- Names are read by their words (``db_password``, ``dbPassword``, ``db-password``); a credential word
  glued inside an unrelated one is not a credential (``keyboard``, ``monkey``, ``author``,
  ``tokenizer``, ``max_tokens``), and a few lookup keys are not either (``sort_key``, ``key``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

# Below this length a value is too likely to be an ordinary word or number to scrub blindly.
MIN_SECRET_CHARS = 8
REDACTED = "[redacted]"
# Deeper than this a structure is replaced whole: nothing flower serves nests so far.
MAX_WALK_DEPTH = 100
# ``hits`` looks at a body this large in pieces and remembers the clean ones (see there); the pieces
# overlap by this much; it remembers this many (16 bytes each).
PIECED_BYTES = 256 * 1024
PIECE_OVERLAP_BYTES = 128
CLEAN_PIECES = 200_000

# -- names -----------------------------------------------------------------------------------------------

# A word of a name that makes it a credential wherever it stands (``pw``, ``hf_tok``, ``Cookie``).
_SECRET_WORDS = frozenset(
    {
        "password", "passwords", "passwd", "passphrase", "passcode", "pw", "pwd", "pswd",
        "secret", "secrets", "token", "tok", "auth", "authorization", "bearer",
        "cookie", "cookies", "credential", "credentials", "cred", "creds", "apikey", "jwt", "otp",
    }
)  # fmt: skip
# Inside one word these still read as a credential (``dbpassword``, ``clientsecret``, ``PGPASSWORD``).
_SECRET_INSIDE = ("passw", "secret", "credential", "apikey", "accesskey", "privatekey", "authtoken", "accesstoken")
# Words that make a name a setting, a count or a label about a credential, not the credential
# (``token_count``, ``max_token``, ``auth_method``, ``api_key_name``, ``use_auth_token``). They do not
# undo the unambiguous words of ``_SECRET_INSIDE`` (``password_length`` stays a secret).
_ABOUT = frozenset(
    {
        "count", "counts", "len", "length", "num", "number", "max", "min", "limit", "limits", "size",
        "budget", "usage", "used", "left", "remaining", "total", "rate", "per", "cost", "costs", "estimate",
        "stats", "id", "ids", "index", "idx", "pos", "position", "offset", "type", "types", "kind", "name",
        "names", "env", "var", "vars", "file", "files", "path", "paths", "dir", "field", "fields", "column",
        "columns", "col", "cols", "pattern", "regex", "prefix", "suffix", "format", "fmt", "expiry", "expires",
        "expiration", "expire", "expired", "ttl", "timeout", "age", "lifetime", "url", "uri", "endpoint",
        "method", "methods", "mode", "enabled", "required", "require", "provider", "providers", "scheme",
        "sock", "is", "has", "use", "uses", "need", "needs", "should", "skip", "no", "valid", "check",
        "checks", "error", "errors", "status", "state", "level", "strategy", "backend", "class", "cls",
        "fn", "func", "handler", "plugin", "host", "server", "domain", "port", "user", "username", "login",
    }
)  # fmt: skip
# ``key`` is a credential with a qualifier before it (``api_key``, ``awsSecretAccessKey``, ``X-Api-Key``)
# unless the qualifier makes it a lookup key (``sort_key``, ``primary_key``); alone it is not (``for
# key in d``).
_KEY_WORDS = frozenset({"key", "keys"})
_LOOKUP_KEY = frozenset(
    {
        "sort", "sorting", "cache", "primary", "foreign", "partition", "dict", "group", "grouping", "join",
        "row", "hash", "lookup", "unique", "map", "mapping", "attr", "attribute", "item", "items", "node",
        "shard", "routing", "bucket", "s3", "object", "obj", "config", "cfg", "data", "dataset", "table",
        "lang", "message", "msg", "event", "metric", "label", "hot", "short", "long", "redis", "memo", "merge",
        "composite", "natural", "surrogate", "cursor", "page", "next", "prev", "last", "first", "range",
        "order", "sub", "parent", "child", "match", "target", "source", "src", "dst", "dest", "output",
        "input", "result", "cell", "task", "step", "run", "job", "rule", "record", "entry", "doc", "json",
        "yaml", "global", "local", "tree", "heap", "queue", "list", "all", "some", "missing", "extra",
        "common", "known", "top", "optional", "other", "dedup", "idempotency", "store", "storage", "query",
    }
)  # fmt: skip
# A ``token`` that is a piece of text, a page cursor or a model's unit (``pad_token``, ``next_token``).
_TEXT_TOKEN = frozenset(
    {
        "pad", "eos", "bos", "unk", "cls", "sep", "mask", "special", "start", "end", "stop", "new", "next",
        "last", "first", "prev", "input", "output", "prompt", "completion", "vocab", "word", "sub", "subword",
        "text", "char", "byte", "cursor", "page", "pagination", "continuation", "sync", "lexer", "parser",
    }
)  # fmt: skip
# ``tokens`` (plural) is usually a count or a list of words; with these before it, credentials.
_CREDENTIAL_TOKENS = frozenset({"api", "access", "auth", "refresh", "bearer", "oauth", "github", "gh", "hf", "secret"})
# The environment variables that look like credentials and are not (the working directory).
_NOT_SECRET_ENV = frozenset({"PWD", "OLDPWD"})

# Every name ``secret_name`` accepts holds one of these (a fast first look).
_NAME_TRIGGER = re.compile(r"p(?:ass|w|swd)|secret|tok|auth|bearer|cookie|cred|key|jwt|otp")  # = _NAME_MARKS
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def name_words(name: str) -> list[str]:
    """The words of a name in any case style, lower case: ``dbPassword`` -> ``["db", "password"]``."""
    return [w.lower() for w in _WORD.findall(name)]


def secret_name(name: str) -> bool:
    """Whether a name (a variable, a mapping key, an environment variable, a header) reads as a
    credential: ``dbPassword``, ``aws_secret_access_key``, ``hf_tok``, ``X-Api-Key``, ``Cookie``;
    not ``keyboard``, ``monkey``, ``author``, ``tokenizer``, ``max_tokens``, ``sort_key``."""
    # Most names hold no credential word: one search, no splitting, nothing cached.
    return _NAME_TRIGGER.search(name.lower()) is not None and _reads_as_secret(name)


@functools.lru_cache(maxsize=8192)  # a namespace repeats its keys ("api_key", "token") many times
def _reads_as_secret(name: str) -> bool:
    words = name_words(name)
    if any(part in w for w in words for part in _SECRET_INSIDE):
        return True
    if _ABOUT.intersection(words):
        return False
    for i, w in enumerate(words):
        before = words[i - 1] if i else ""
        if w in ("token", "tok") and before in _TEXT_TOKEN:
            continue
        if w in _SECRET_WORDS or (w == "pass" and i == len(words) - 1 and i > 0):
            return True
        if w in _KEY_WORDS and i and before not in _LOOKUP_KEY:
            return True
        if w == "tokens" and before in _CREDENTIAL_TOKENS:
            return True
        if len(w) > 5 and w.endswith(("token", "pwd", "passwd")):  # mytoken, dbpwd
            return True
    return False


def secret_env_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (``ANTHROPIC_API_KEY``,
    ``ANTHROPIC_AUTH_TOKEN``, ``PGPASSWORD``); ``PWD`` is the working directory."""
    return name not in _NOT_SECRET_ENV and secret_name(name)


# -- shapes ----------------------------------------------------------------------------------------------

_B = r"(?<![A-Za-z0-9_])"  # a token starts where a word does not go on
_TOKEN_SHAPES = [
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),  # Anthropic: distinctive enough to need no word start
    re.compile(_B + r"sk-(?:proj-|svcacct-|admin-|None-)?(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{20,}"),  # OpenAI
    re.compile(_B + r"[sr]k_(?:live|test)_[A-Za-z0-9]{10,}"),  # Stripe
    re.compile(_B + r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),  # GitHub
    re.compile(_B + r"hf_[A-Za-z0-9]{20,}"),  # Hugging Face
    re.compile(_B + r"(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA|ASCA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    re.compile(_B + r"xox[abposr]-[A-Za-z0-9\-]{10,}"),  # Slack
    re.compile(_B + r"AIza[0-9A-Za-z_\-]{35}"),  # Google
    re.compile(_B + r"(?:glpat-[A-Za-z0-9_\-]{20,}|npm_[A-Za-z0-9]{36})"),  # GitLab, npm
    re.compile(_B + r"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"),  # JWT
    re.compile(r"-----BEGIN[A-Z ]{0,30}PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z ]{0,30}PRIVATE KEY-----|\Z)"),
]
# An AWS secret access key: 40 characters of base64 standing alone (checked for mixed case and a
# digit after the match: lookaheads here would rescan long base64 runs quadratically).
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_BEARER = re.compile(r"(?i)\bbearer[ \t]+(?P<v>[A-Za-z0-9._~+/=\-]{8,})")
_URL_PASSWORD = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]{1,30}://[^\s:/?#@'\"<>]*:(?P<v>[^\s/?#@'\"<>]+)@")

# name = value, name: value, name => value; "name": value; ["name"] = value; name: type = value.
_ASSIGN = re.compile(
    r"""
    (?:
        (?:(?<=\\[nrt])|(?<![\w$.\-]))(?P<name>[A-Za-z_$][\w$]*(?:[.\-][A-Za-z_$][\w$]*)*)
      | "(?P<dq>[^"\\\n]{1,80})"
      | '(?P<sq>[^'\\\n]{1,80})'
      | (?P<zh>密码|口令|密钥|秘钥|令牌)
    )
    [ \t]*\]?[ \t]*
    (?::[ \t]*[A-Za-z_][\w.\[\], |]{0,60}?[ \t]+(?==))?
    (?P<op>:=|==|=>|=|:(?!:)|\uff1a)
    [ \t]*
    (?=  # looked at, not taken: a name that is no secret may hold one in its value (conninfo = 'password=…')
        [rRbBuUfF]{0,2}(?P<t>\"\"\"|''')(?P<v3>[\s\S]*?)(?:(?P=t)|\Z)
      | [rRbBuUfF]{0,2}"(?P<v1>(?:[^"\\\n]|\\.)*)
      | [rRbBuUfF]{0,2}'(?P<v2>(?:[^'\\\n]|\\.)*)
      | (?P<open>[\[({])
      | (?P<scheme>(?i:bearer|basic|token|digest)[ \t]+)?(?P<v4>[^\s,;'"(){}\[\]<>`]+)
    )
    """,
    re.VERBOSE,
)
# Bare values that are not a secret but code or a type: ``password = getpass()``, ``token: str``.
_NOT_VALUES = frozenset({"None", "True", "False", "null", "true", "false", "nil", "undefined", "str", "bytes"})
_TYPE_WORDS = frozenset({"int", "float", "bool", "dict", "list", "tuple", "Any", "SecretStr", "Secret", "object"})
_EXPRESSION = re.compile(r"[A-Za-z_][\w.]*")
# How far a bracketed value is looked into for its strings (``password = ["a", "b"]``).
BRACKET_CHARS = 2_000
# Headers whose value runs to the end of the line (``Cookie: a=1; b=2``).
_LINE_VALUED = frozenset({"cookie", "set-cookie", "authorization", "proxy-authorization"})

# Cheap first looks, each a superset of what its rules find in a text or its JSON encoding (where an
# inner quote is ``\\"``): the rules run only where one matched. Plain substring searches (Python's
# regex engine tries an alternation at every position: 70 ns a byte, 0.3 s for a 5 MB body).
_SHAPE_MARKS = (
    "sk-", "sk_", "rk_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "hf_", "AKIA", "ASIA", "ABIA",
    "ACCA", "AGPA", "AIDA", "AIPA", "ANPA", "ANVA", "AROA", "APKA", "ASCA", "AIza", "xox", "glpat-", "npm_",
    "eyJ", "-----BEGIN", "://",
)  # fmt: skip
# In lowered text: every name ``secret_name`` accepts holds one ("bearer" also marks a Bearer token).
_NAME_MARKS = ("pass", "pw", "pswd", "secret", "tok", "auth", "bearer", "cookie", "cred", "key", "jwt", "otp")
_ZH_NAMES = ("密码", "口令", "密钥", "秘钥", "令牌")
# What follows a credential word for the rule by name to apply: the rest of the name, then an operator.
# The rest of a name may hold escapes and quotes of the other kind (a JSON key ``"auth \\"x"``); one
# that reads as a credential is at most 80 characters in text, any length as a key: 1,000 here.
_NAME_TAIL = re.compile(r"(?:[^\"\\\n:=\uff1a]|\\.){0,1000}[\\\"'\] \t]{0,8}[:=\uff1a]")
_NAME_TAIL_BYTES = re.compile(rb"(?:[^\"\\\n:=]|\\.){0,1000}[\\\"'\] \t]{0,8}(?::|=|" + "\uff1a".encode() + rb")")
# Over a large body every pass costs (3 ms for 5 MB): the AWS key ids are one pass over a translated
# copy (20 capitals or digits in a row), the GitHub marks are looked for after "gh", the Chinese names
# only in a body that is not ASCII.
_AWS_ID_MARKS = ("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AIPA", "ANPA", "ANVA", "AROA", "APKA", "ASCA")
_GH_MARKS_BYTES = tuple(m.encode() for m in _SHAPE_MARKS if m.startswith("gh"))
_SHAPE_MARKS_BYTES = tuple(m.encode() for m in _SHAPE_MARKS if m not in _AWS_ID_MARKS and not m.startswith("gh"))
_CAPITALS_BYTES = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", b"U" * 36)
_NAME_MARKS_BYTES = tuple(m.encode() for m in _NAME_MARKS)
_ZH_NAMES_BYTES = tuple(m.encode() for m in _ZH_NAMES)
# Base64 characters to "a", the rest left as they are (none of them "a"): a run of 40 is then a
# substring search.
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/+"
_B64_STR = str.maketrans(_B64, "a" * len(_B64))
_B64_BYTES = bytes.maketrans(_B64.encode(), b"a" * len(_B64))
_RUN_40 = "a" * 40
_LONG_RUN = re.compile(r"[A-Za-z0-9/+]{40,}")
_LONG_RUN_BYTES = re.compile(rb"[A-Za-z0-9/+]{40,}")
# Below _QUICK_CHARS a text is first looked at with one search for every mark, lowered (a superset
# of both kinds of marks and of a 40-character run, which needs the length): a regex over a short
# text beats 45 substring searches; over a long one it is the other way round.
_QUICK_CHARS = 40
_QUICK = re.compile(
    "|".join(sorted({re.escape(m.lower()) for m in (*_SHAPE_MARKS, *_NAME_MARKS, *_ZH_NAMES)}, key=len, reverse=True))
)
# The shortest text a rule by shape or name can find something in (``pw=x``).
_SHORTEST = 4


def _named(low: Any) -> bool:
    """Whether lowered ``low`` (text or bytes) holds a credential word followed by an operator."""
    text = isinstance(low, str)
    tail = _NAME_TAIL if text else _NAME_TAIL_BYTES
    marks = (*_NAME_MARKS, *_ZH_NAMES) if text else _NAME_MARKS_BYTES + (() if low.isascii() else _ZH_NAMES_BYTES)
    for mark in marks:
        at = low.find(mark)
        while at >= 0:
            if tail.match(low, at + len(mark)) is not None:
                return True
            at = low.find(mark, at + 1)
    return False


def _mixed(run: str | bytes) -> bool:
    """Upper and lower case letters and a digit: an AWS secret key, not a hash or a word."""
    text = run.decode("ascii") if isinstance(run, bytes) else run
    return not text.islower() and not text.isupper() and any(c.isdigit() for c in text)


def _assignment(m: re.Match[str], text: str) -> list[tuple[int, int]]:
    """The spans of the value a credential-named name is given (none when it is not one)."""
    bare = m.group("name")
    name = bare.rsplit(".", 1)[-1] if bare is not None else m.group("dq") or m.group("sq") or m.group("zh") or ""
    if not m.group("zh") and (name in _NOT_SECRET_ENV or not secret_name(name)):
        return []
    for group in ("v3", "v1", "v2"):
        if m.group(group) is not None:
            start, end = m.span(group)
            return [(start, end)] if end > start else []
    if m.group("open") is not None:  # password = ["a", "b"], auth = ("user", "pw"): every string in it
        close = _closing(text, m.start("open"))
        return [s.span("v") for s in _STRING.finditer(text, m.end("open"), close) if s.end("v") > s.start("v")]
    start, end = m.span("v4")
    value = m.group("v4")
    if value in _NOT_VALUES or (m.group("op") == ":" and value in _TYPE_WORDS):
        return []
    if _EXPRESSION.fullmatch(value):
        if end < len(text) and text[end] in "([":
            return []  # a call or a lookup: getpass.getpass(), os.environ["X"]
        op_at = m.start("op")
        spaced = text[op_at - 1 : op_at] == " " and text[m.end("op") : start] != ""
        if m.group("op") in ("=", "==") and spaced and not any(c.isdigit() for c in value):
            return []  # code naming another variable: self.token = token (env lines have no spaces)
    if m.group("op") == ":" and name.lower() in _LINE_VALUED:
        line_end = text.find("\n", end)
        end = len(text) if line_end < 0 else line_end
    return [(start, end)]


_STRING = re.compile(r"""(?P<q>["'])(?P<v>(?:(?!(?P=q))[^\\\n]|\\.)*)(?P=q)""")
_PAIRS = {"[": "]", "(": ")", "{": "}"}


def _closing(text: str, at: int) -> int:
    """Where the bracket at ``at`` closes (strings skipped), or ``BRACKET_CHARS`` on; the end of text at most."""
    depth, quote = 0, ""
    limit = min(len(text), at + BRACKET_CHARS)
    i = at
    while i < limit:
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in _PAIRS:
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return limit


def _shaped(text: str, *, names: bool = True) -> list[tuple[int, int]]:
    """The spans of ``text`` that the rules by shape (and, with ``names``, by name) find."""
    found: list[tuple[int, int]] = []
    if len(text) < _SHORTEST:
        return found
    low = text.lower()
    if len(text) < _QUICK_CHARS and _QUICK.search(low) is None:  # most short texts: one search
        return found
    if "bearer" in low or any(mark in text for mark in _SHAPE_MARKS):
        for rx in _TOKEN_SHAPES:
            found += [m.span() for m in rx.finditer(text)]
        found += [m.span("v") for m in _BEARER.finditer(text)]
        found += [m.span("v") for m in _URL_PASSWORD.finditer(text)]
    if names and _named(low):
        for m in _ASSIGN.finditer(text):
            found += _assignment(m, text)
    if len(text) >= 40 and _RUN_40 in text.translate(_B64_STR):
        for m in _AWS_SECRET.finditer(text):
            if m.group()[0] != "/" and _mixed(m.group()):
                found.append(m.span())
    return found


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


# -- values this process knows ----------------------------------------------------------------------------

_remembered: set[str] = set()
_remembered_lock = threading.Lock()


def remember(value: str) -> None:
    """Make ``value`` a secret for every ``Redactor`` of this process from now on (a session store's
    password, said once where it is parsed)."""
    if isinstance(value, str) and len(value) >= MIN_SECRET_CHARS:
        with _remembered_lock:
            _remembered.add(value)


def environment_secrets(environ: Mapping[str, str]) -> set[str]:
    """The values of an environment's credentials: credential-named variables whatever their shape,
    and what the rules by shape find in the others (a URL's password in ``FLOWER_SESSIONS``)."""
    found: set[str] = set()
    for name, value in environ.items():
        if not isinstance(value, str) or not value:
            continue
        if secret_env_name(name):
            found.add(value)
        else:
            found.update(value[s:e] for s, e in _merged(_shaped(value, names=False)))
    return found


class Redactor:
    """Finds and replaces secrets in text (``__call__``) and in JSON-like data (``walk``).

    Args:
        environ: the environment whose credentials are secret (default ``os.environ``, as it is now).
        values: more secret values (a notebook variable that holds a password).
    """

    def __init__(self, environ: Mapping[str, str] | None = None, *, values: Iterable[str] = ()) -> None:
        env = os.environ if environ is None else environ
        self._given = environment_secrets(env) | {v for v in values if isinstance(v, str)}
        self._known_from = -1
        self._known: re.Pattern[str] | None = None
        self._clean: set[bytes] = set()
        self._encoded: list[bytes] = []
        self._refresh()

    def _refresh(self) -> None:
        """(Re)build the search for known values when ``remember`` added one."""
        if self._known_from == len(_remembered):  # the common case, without taking the lock
            return
        with _remembered_lock:
            if self._known_from == len(_remembered):
                return
            self._known_from = len(_remembered)
            found = {v for v in self._given | _remembered if len(v) >= MIN_SECRET_CHARS}
            self._clean = set()  # found clean without the values just remembered
        # Bodies are redacted after JSON encoding, where a value with quotes, backslashes or
        # non-ASCII characters appears escaped: look for both spellings.
        found |= {json.dumps(v, ensure_ascii=as_ascii)[1:-1] for v in found for as_ascii in (True, False)}
        # Longest first, so a secret that contains another is replaced whole.
        ordered = sorted(found, key=len, reverse=True)
        self._known = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        self._encoded = [v.encode("utf-8", "surrogatepass") for v in ordered]

    def spans(self, text: str, *, names: bool = True) -> list[tuple[int, int]]:
        """Where the secrets of ``text`` are, merged, in order.

        Args:
            names: also look for values given to credential names (``password = "…"``). Off for text
                that holds names and types but no values (a variable's line: ``pw: str``).
        """
        self._refresh()
        found = _shaped(text, names=names)
        if self._known is not None and len(text) >= MIN_SECRET_CHARS:
            found += [m.span() for m in self._known.finditer(text)]
        return _merged(found) if len(found) > 1 else found

    def __call__(self, text: str, *, names: bool = True) -> str:
        """``text`` with every secret replaced by ``[redacted]``."""
        spans = self.spans(text, names=names)
        for start, end in reversed(spans):
            text = text[:start] + REDACTED + text[end:]
        return text

    def findings(self, text: str) -> list[str]:
        """The secrets in ``text`` (what ``__call__`` would replace)."""
        return [text[s:e] for s, e in self.spans(text)]

    def holds(self, text: str) -> bool:
        """Whether ``text`` holds a secret (what ``__call__`` would change)."""
        return bool(self.spans(text))

    def hits(self, data: bytes) -> bool:
        """Whether UTF-8 (JSON) ``data`` may hold a secret: never False when ``walk`` of what it
        encodes would change something.

        A body of ``PIECED_BYTES`` or more (a 10,000-row manifest: 5 MB) is looked at in pieces, cut
        between array elements (``},{``); a piece found clean is remembered (by digest), so a table
        that grew by a row costs a look at that row, not at all of them again.
        """
        self._refresh()
        if len(data) < PIECED_BYTES:
            return self._may_hold(data)
        overlap = max(PIECE_OVERLAP_BYTES, max(map(len, self._encoded), default=0))
        windows: list[tuple[bytes, bytes]] = []  # (digest, window) of the pieces not known clean
        seen: list[bytes] = []
        start = 0
        for piece in data.split(b"},{"):
            end = start + len(piece)
            # With the head of the next piece: a name and its operator, or a known value, may span the cut.
            window = data[start : end + overlap]
            digest = hashlib.blake2b(window, digest_size=16).digest()
            seen.append(digest)
            if digest not in self._clean:
                windows.append((digest, window))
            start = end + 3
        # Mostly new (a rewritten file): one look at the whole is cheaper than one per piece.
        if len(windows) > len(seen) // 4:
            if self._may_hold(data):
                return True
            windows = []
        elif any(self._may_hold(window) for _, window in windows):
            return True
        if len(self._clean) + len(seen) > CLEAN_PIECES:
            self._clean.clear()
        self._clean.update(seen)
        return False

    def _may_hold(self, data: bytes) -> bool:
        if any(v in data for v in self._encoded) or any(mark in data for mark in _SHAPE_MARKS_BYTES):
            return True
        if b"gh" in data and any(mark in data for mark in _GH_MARKS_BYTES):
            return True
        if b"U" * 20 in data.translate(_CAPITALS_BYTES):  # an AWS key id: AKIA and 16 more
            return True
        low = data.lower()
        if b"bearer" in low or _named(low):
            return True
        # Without the bounds of the rule: in JSON a run may follow an escape (``\\nAKIA…``).
        return _RUN_40.encode() in data.translate(_B64_BYTES) and any(
            _mixed(m.group()) for m in _LONG_RUN_BYTES.finditer(data)
        )

    def walk(self, value: Any, *, secret: bool = False, depth: int = 0) -> Any:
        """A copy of JSON-like ``value`` (dicts, lists, tuples, strings, scalars) with every secret
        string replaced: found in the text, or under a key that reads as a credential (at any depth)."""
        if isinstance(value, str):
            return REDACTED if secret and value else self(value)
        if depth > MAX_WALK_DEPTH:
            return REDACTED
        if isinstance(value, dict):
            return {
                (self(k, names=False) if isinstance(k, str) else k): self.walk(
                    v, secret=secret or (isinstance(k, str) and secret_name(k)), depth=depth + 1
                )
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self.walk(v, secret=secret, depth=depth + 1) for v in value]
        return value
