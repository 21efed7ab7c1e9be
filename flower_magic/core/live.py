"""A run as files any front end can follow and talk to: the event log, the live state, the inbox.

Every run (a notebook's, a terminal's, a background runner's) keeps three things in its run dir:

``events.jsonl``
    Append-only JSON lines, one record each (``n`` counts from 1, ``t`` is epoch seconds, ``type``
    says what it is): ``start`` (the run's settings; its ``lang`` is the language the run dir
    remembers, ``run_lang``), ``event`` (an engine ``Event`` as
    ``Event.to_dict``), ``step`` (a finished step's result), ``line`` (a front end's phrase line),
    ``goals`` (a new goal list), ``heard`` (an answer, remark or stop the run took from the inbox),
    ``end`` (how it ended). A new run starts a new log. Past ``MAX_PART_BYTES`` the log moves to
    ``events.1.jsonl`` and goes on in a new part that starts with the ``start`` record again; so the
    log never holds more than two parts and every part can be read alone.
``live.json``
    The running process's state: pid, front end, state (``running`` / ``waiting`` / ``idle`` /
    ``ended``), step, round, open questions. Rewritten atomically when one of those changes.
``inbox/``
    One JSON file per message to the running process (``answer``, ``remark``, ``stop``), written
    whole and renamed into place; the run takes them in name order and deletes each one it took.

Guarantees:
    - Writing never raises into the run: a disk that fills up stops the log (``broken`` says why),
      not the agent. Each record is one ``write`` of a whole line, so a reader never sees half of
      one; the log is fsynced at step boundaries (``start``, ``step``, ``end``, a step's start).
    - A record is at most ``MAX_RECORD_BYTES``: long texts and payloads are clipped, never dropped.
    - No record holds a secret ``core.redaction`` finds (an ``env`` the agent ran: the environment's
      credentials whatever their shape, keys and tokens by shape, values given to credential names,
      the session store's password); it is scrubbed before it is clipped.
    - ``Follower`` reads only whole lines and follows a log across a move to the next part.
    - ``live_state`` says a run is live only while its process holds the run lock (``core.runlock``),
      and it tries the lock to know (``runlock.holder``): a process killed with ``kill -9`` is never
      shown as running, even when its pid now names another process or ``live.json`` and
      ``run.lock``'s record are forged. Asking writes nothing, creates nothing, needs only read
      access, and does not disturb the holder.
    - ``post`` checks before it writes: a run that is not live, an unknown kind, words too long or
      not text (a lone surrogate), an inbox that is not a folder each raise ``UserError`` and leave
      the run dir as it was.
    - The inbox skips anything that is not a regular file or is larger than ``MAX_MESSAGE_BYTES``;
      a message it cannot read is kept aside (``<name>.bad``), never lost silently.
    - No symbolic link is written through: an inbox that is one is neither taken (nothing in the
      folder it points to is read, deleted or renamed) nor posted to (``LinkRefused``); the log is
      opened ``O_NOFOLLOW`` and ``live.json`` is replaced by a rename, never written into.
    - A remark is appended to the brief (``HumanChannel.amend``) before the run is interrupted with
      it, so words a killed run took but never got to the model are found by the next run. An answer
      that came after its question closed is taken as a remark (``as_remark`` in its ``heard``
      record), never dropped.
Not guaranteed:
    - Followers on another host of a network filesystem see records late (whatever its cache allows).
    - A run on another host is seen as live only where that filesystem carries its locks between
      hosts (NFS does; see ``core.runlock``): where it does not, it is not live from here, just as
      its lock would not refuse a run started here.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import secrets
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flower_magic.core import runlock
from flower_magic.core.durable import BINARY, NOFOLLOW, read_capped, write_atomic
from flower_magic.core.errors import LinkRefused, UserError, logged
from flower_magic.core.events import Event
from flower_magic.core.printable import unwritable_at
from flower_magic.core.redaction import Redactor

log = logging.getLogger(__name__)

LOG_NAME = "events.jsonl"
OLD_LOG_NAME = "events.1.jsonl"
LIVE_NAME = "live.json"
INBOX_NAME = "inbox"
RUNNER_LOG_NAME = "runner.log"

MAX_PART_BYTES = 8 * 1024 * 1024  # two parts: a long run's log stays under 16 MiB
MAX_RECORD_BYTES = 64 * 1024
TEXT_CHARS = 16_000  # what any view shows of one event is far less
PAYLOAD_CHARS = 24_000
MAX_MESSAGE_BYTES = 256 * 1024
MAX_WORDS_CHARS = 64_000  # an answer or a remark; longer words belong in a file the agent reads
MAX_LIVE_BYTES = 1024 * 1024
HEAD_BYTES = 16 * 1024  # a part's first line (its start record) is shorter
POLL_S = 0.05  # how often the inbox and followers look (each look is one stat and at most one read)

OPS = ("answer", "remark", "stop")
SOURCES = ("notebook", "terminal", "panel", "api")
RUNNING, WAITING, IDLE, ENDED = "running", "waiting", "idle", "ended"
DURABLE_TYPES = frozenset({"start", "step", "end"})


def log_paths(run_dir: Path) -> tuple[Path, Path]:
    """``(events.1.jsonl, events.jsonl)``: the older part first."""
    return run_dir / OLD_LOG_NAME, run_dir / LOG_NAME


# -- writing -----------------------------------------------------------------------------------------


def _clip_event(event: Event, redact: Redactor) -> dict[str, Any]:
    # Scrubbed before it is clipped: a secret cut in half would keep its head readable.
    data: dict[str, Any] = redact.walk(event.to_dict())
    if len(data["text"]) > TEXT_CHARS:
        data["text"] = data["text"][:TEXT_CHARS] + "…"
    try:
        payload = json.dumps(data["payload"], ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        payload = "{}"
    if len(payload) > PAYLOAD_CHARS:
        # Keep the small facts (ids, states, numbers); clip the long values.
        small: dict[str, Any] = {}
        for key, value in (data["payload"] or {}).items():
            text = json.dumps(value, ensure_ascii=False, default=str)
            small[key] = value if len(text) <= 2000 else text[:2000] + "…"
        data["payload"] = small
    else:
        data["payload"] = json.loads(payload)
    return data


class EventLog:
    """The writer of one run's event log (one per run; thread-safe; never raises)."""

    def __init__(self, run_dir: Path, start: dict[str, Any], *, part_bytes: int = MAX_PART_BYTES) -> None:
        self.run_dir = run_dir
        self.part_bytes = part_bytes
        self.run_id = secrets.token_hex(8)
        self.n = 0
        self.broken = ""
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._size = 0
        # No secret is written (an `env` the agent ran, a store URL in a task): core.redaction.
        self._redact = Redactor()
        self._start = self._redact.walk(dict(start, run=self.run_id, pid=os.getpid(), host=socket.gethostname()))
        old, new = log_paths(run_dir)
        try:
            for path in (old, new):  # a new run starts a new log
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            self._open(new)
        except OSError as exc:
            self._break(exc)
            return
        self.record("start", **self._start)

    def _open(self, path: Path) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | BINARY | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags, 0o644)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        self._fd, self._size = fd, st.st_size

    def _break(self, exc: BaseException) -> None:
        self.broken = f"{type(exc).__name__}: {exc}"
        log.warning("the event log stopped: %s", self.broken)
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def record(self, type_: str, **fields: Any) -> int:
        """Append one record; returns its ``n`` (0 when the log is broken)."""
        with self._lock:
            if self._fd is None:
                return 0
            self.n += 1
            record = {"n": self.n, "t": round(time.time(), 4), "type": type_, **fields}
            line = json.dumps(record, ensure_ascii=False, default=str).encode("utf-8", "replace")
            if self._redact.hits(line):
                record = self._redact.walk(json.loads(line))
                line = json.dumps(record, ensure_ascii=False).encode("utf-8", "replace")
            if len(line) >= MAX_RECORD_BYTES:
                record = {"n": self.n, "t": record["t"], "type": type_, "clipped": True}
                line = json.dumps(record).encode()
            try:
                if self._size + len(line) + 1 > self.part_bytes and type_ != "start":
                    self._next_part()
                os.write(self._fd, line + b"\n")
                self._size += len(line) + 1
                if type_ in DURABLE_TYPES or (type_ == "event" and fields.get("event", {}).get("kind") == "step"):
                    os.fsync(self._fd)
            except OSError as exc:
                self._break(exc)
                return 0
            return self.n

    def event(self, event: Event) -> int:
        return self.record("event", event=_clip_event(event, self._redact))

    def _next_part(self) -> None:
        assert self._fd is not None
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None
        old, new = log_paths(self.run_dir)
        os.replace(new, old)
        self._open(new)
        head = {"n": self.n, "t": round(time.time(), 4), "type": "start", **self._start, "part": True}
        line = json.dumps(head, ensure_ascii=False, default=str).encode("utf-8", "replace") + b"\n"
        os.write(self._fd, line)  # type: ignore[arg-type]  # _open set it
        self._size += len(line)

    @staticmethod
    def append_end(run_dir: Path, fields: dict[str, Any]) -> None:
        """Add an ``end`` record to the log a run left without one (it was killed): what a later start
        found (``front.launch.record_found``). Raises OSError."""
        records = read_log(run_dir)
        n = max((int(r.get("n") or 0) for r in records), default=0) + 1
        line = json.dumps({"n": n, "t": round(time.time(), 4), "type": "end", **fields}, ensure_ascii=False)
        flags = os.O_WRONLY | os.O_APPEND | BINARY | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(log_paths(run_dir)[1], flags)
        try:
            os.write(fd, line.encode("utf-8", "replace") + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.fsync(self._fd)
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = None


# -- reading -----------------------------------------------------------------------------------------


def _records(data: bytes) -> Iterator[dict[str, Any]]:
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            continue  # a person's edit or a torn tail: skipped, the rest still reads
        if isinstance(record, dict) and isinstance(record.get("n"), int) and isinstance(record.get("type"), str):
            yield record


def read_log(run_dir: Path) -> list[dict[str, Any]]:
    """Every record of the last run's log, oldest first (both parts; a part's repeated ``start``
    is dropped). Never raises: what cannot be read is not there."""
    out: list[dict[str, Any]] = []
    seen_start = False
    last = 0
    for path in log_paths(run_dir):
        try:
            data = read_capped(path, MAX_PART_BYTES + MAX_RECORD_BYTES * 2)
        except OSError:
            continue
        for record in _records(data):
            if record["type"] == "start":
                if seen_start and record.get("part"):
                    continue
                seen_start = True
            if record["n"] < last:  # an older run's part left behind: start over
                out.clear()
            last = record["n"]
            out.append(record)
    return out


def start_of(run_dir: Path) -> dict[str, Any] | None:
    """The ``start`` record of the run dir's log (the run's settings), or None. Reads only the first
    line of ``events.jsonl``: every part starts with it."""
    try:
        fd = os.open(run_dir / LOG_NAME, os.O_RDONLY | BINARY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_RECORD_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    first = data[: data.find(b"\n") + 1]
    for record in _records(first):
        if record["type"] == "start":
            return record
    return None


def run_lang(run_dir: Path) -> str | None:
    """The language the run dir's last run spoke (its ``start`` record), or None when no log says one:
    what a later start with no words of its own, ``--status``, a follower and the panel speak."""
    from flower_magic.core.words import LANGS

    lang = (start_of(run_dir) or {}).get("lang")
    return lang if lang in LANGS else None


class Follower:
    """Reads a log as it grows: ``poll()`` returns the records written since the last call.

    Reads by path each time (no file is held open, so the writer can move a part on any platform)
    and only whole lines. When the file is another one than last time (its first line changed), it is
    read from its beginning: a new part of the same run (the records the old part got after the last
    look are read from ``events.1.jsonl`` first) or a new run's log (followed from its ``start``;
    ``restarted`` counts those).
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.offset = 0
        self.n = 0
        self.run_id = ""
        self.restarted = 0
        self.skipped = 0  # records that moved out of the log before this follower read them
        self._head: bytes | None = None

    def poll(self) -> list[dict[str, Any]]:
        old, new = log_paths(self.run_dir)
        try:
            fd = os.open(new, os.O_RDONLY | BINARY | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            return []
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return []
            # Which part of which run this file is: its first line (the part's ``start`` record). A
            # file's identity would not do: a new part may reuse the inode of the part it replaced.
            first_line = os.read(fd, HEAD_BYTES).split(b"\n", 1)[0]
            first = self._head is None
            moved = not first and (first_line != self._head or st.st_size < self.offset)
            if moved or first:
                self.offset = 0
            self._head = first_line
            if st.st_size <= self.offset:
                return []
            os.lseek(fd, self.offset, os.SEEK_SET)
            data = os.read(fd, min(st.st_size - self.offset, MAX_PART_BYTES + MAX_RECORD_BYTES))
        finally:
            os.close(fd)
        whole = data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        records = list(_records(whole))
        out: list[dict[str, Any]] = []
        if records and records[0]["type"] == "start":
            head = records[0]
            if head.get("run") != self.run_id:  # a new run's log
                if self.run_id:
                    self.restarted += 1
                self.run_id, self.n = str(head.get("run") or ""), 0
                if head.get("part"):
                    out.append(head)
            if head.get("part") and (moved or first or not self.n):  # the run went on in a new part
                out.extend(self._missed(old))
        for record in records:
            if record["type"] == "start":
                if record.get("part"):
                    continue
            elif record["n"] <= self.n:
                continue
            elif self.n and record["n"] > self.n + 1:
                self.skipped += record["n"] - self.n - 1  # fell more than a part behind
            out.append(record)
            self.n = max(self.n, record["n"])
        return out

    def _missed(self, old: Path) -> list[dict[str, Any]]:
        try:
            data = read_capped(old, MAX_PART_BYTES + MAX_RECORD_BYTES * 2)
        except OSError:
            return []
        records = list(_records(data))
        if not records or records[0].get("run") != self.run_id:
            return []
        out = [r for r in records if r["type"] != "start" and r["n"] > self.n]
        if out:
            if self.n and out[0]["n"] > self.n + 1:
                self.skipped += out[0]["n"] - self.n - 1
            self.n = max(r["n"] for r in out)
        return out


# -- the live state ------------------------------------------------------------------------------------


@dataclass
class LiveState:
    """What ``live.json`` says (plus ``live``: its process holds the run lock now).

    Attributes:
        pid: the process running the workflow.
        front_end: ``notebook``, ``terminal``, ``background`` or ``api``.
        state: ``running``, ``waiting`` (a question is open), ``idle`` (between attempts, e.g. an
            outage's wait) or ``ended``.
        step: the step running ("" before the first).
        round: the judge's round (0 outside the work step).
        asks: the open questions, ``{"id", "question", "options"}`` each.
        since / updated: epoch seconds.
        n: the last record's number in the event log when this was written.
        boot: the machine's boot id when it was written (Linux; "" elsewhere): after a reboot the
            recorded pid may name another process, so a record from an earlier boot is never live.
    """

    pid: int = 0
    front_end: str = ""
    state: str = RUNNING
    step: str = ""
    round: int = 0
    asks: list[dict[str, Any]] = field(default_factory=list)
    since: float = 0.0
    updated: float = 0.0
    n: int = 0
    run: str = ""
    boot: str = ""
    live: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def live_state(run_dir: Path) -> LiveState | None:
    """The run dir's live state, or None when nothing was ever recorded or it cannot be read.
    ``.live`` is True only while the recorded process holds the run lock, as a try of the lock finds
    (``runlock.holder``), not as its record and a live pid would suggest."""
    try:
        data = json.loads(read_capped(run_dir / LIVE_NAME, MAX_LIVE_BYTES))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    known = {k: v for k, v in data.items() if k in LiveState.__dataclass_fields__ and k != "live"}
    try:
        state = LiveState(**known)
    except TypeError:
        return None
    if not isinstance(state.pid, int) or not isinstance(state.asks, list):
        return None
    if state.state == ENDED or (state.boot and state.boot != boot_id()):
        return state  # ended, or written before the machine last started: nothing of it runs now
    # The lock is tried, not its record believed: after kill -9 the record and live.json stay, and
    # their pid may be another process's by now (or the files forged). holder() is None unless the
    # lock is held; its record then names the holder, which must be the process live.json names.
    holder = runlock.holder(run_dir)
    state.live = holder is not None and holder.pid == state.pid
    return state


def boot_id() -> str:
    """This boot of the machine (Linux's ``/proc/sys/kernel/random/boot_id``), or "" where unknown."""
    global _boot
    if _boot is None:
        try:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
                _boot = f.read(64).strip()
        except OSError:
            _boot = ""
    return _boot


_boot: str | None = None


def live_pid(run_dir: Path) -> int | None:
    """The pid of the process running this run dir's workflow now, or None."""
    state = live_state(run_dir)
    return state.pid if state is not None and state.live else None


# -- the inbox -----------------------------------------------------------------------------------------


class NotLive(UserError):
    """There is no live run to talk to."""


def post(run_dir: Path, op: str, *, text: str = "", ask_id: str = "", source: str = "api", lang: str = "") -> Path:
    """Leave a message for the live run of ``run_dir``; returns the message's file.

    Raises:
        NotLive: no process runs this run dir now.
        UserError: an unknown ``op``, words longer than ``MAX_WORDS_CHARS`` or holding a lone
            surrogate, or an inbox that is not a folder (``LinkRefused``: a symbolic link). Nothing
            is written then.
    """
    from flower_magic.core.words import pick_lang_or_default, say, short_path

    lang = pick_lang_or_default(lang)
    if op not in OPS:
        raise UserError(say("live_bad_op", lang, op=op[:40], ops=", ".join(OPS)))
    if not isinstance(text, str) or len(text) > MAX_WORDS_CHARS:
        raise UserError(say("live_too_long", lang, n=MAX_WORDS_CHARS))
    at = next((i for i in (unwritable_at(text), unwritable_at(ask_id)) if i is not None), None)
    if at is not None:  # a lone surrogate (a typed line's invalid UTF-8): no message file can hold it
        raise UserError(say("live_not_text", lang, at=at + 1))
    state = live_state(run_dir)
    if state is None or not state.live:
        raise NotLive(say("live_none", lang, path=short_path(run_dir)))
    box = run_dir / INBOX_NAME
    if os.path.islink(box):  # a cloned runs/inbox -> elsewhere: the message would be written there
        raise LinkRefused(box, lang)
    if os.path.lexists(box) and not box.is_dir():
        raise UserError(say("live_inbox_not_dir", lang, path=short_path(box)))
    message = {"op": op, "text": text, "id": ask_id, "from": source if source in SOURCES else "api", "t": time.time()}
    name = f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(3)}.json"
    path = box / name
    write_atomic(path, json.dumps(message, ensure_ascii=False).encode())
    return path


# Taking the inbox through a descriptor of the folder itself, opened without following a link: a
# link swapped in for the inbox after that open is never read, emptied or renamed in. Where the
# system cannot (Windows: no dir_fd, no O_NOFOLLOW) an lstat of the folder comes first instead.
_DIR_FDS = {os.open, os.stat, os.unlink, os.rename} <= os.supports_dir_fd and os.listdir in os.supports_fd


def _open_box(box: Path) -> int | None:
    """A descriptor of the inbox folder (None where the system has no dir_fd), never through a link.

    Raises:
        OSError: no inbox, not a folder, or a link.
    """
    if not _DIR_FDS:
        if not stat.S_ISDIR(os.lstat(box).st_mode):
            raise OSError(errno.ENOTDIR, "not a folder", str(box))
        return None
    return os.open(box, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW)


def _read_message(name: str | Path, box_fd: int | None) -> dict[str, Any] | None:
    """One message file, or None when it is not one (unreadable, too big, not a message)."""
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | NOFOLLOW | BINARY, dir_fd=box_fd)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MESSAGE_BYTES:
                return None
            data = fh.read(MAX_MESSAGE_BYTES + 1)
        message = json.loads(data) if len(data) <= MAX_MESSAGE_BYTES else None
    except (OSError, ValueError):
        return None
    ok = isinstance(message, dict) and message.get("op") in OPS and isinstance(message.get("text", ""), str)
    return message if ok else None


def take_inbox(run_dir: Path) -> list[dict[str, Any]]:
    """The messages waiting in the inbox, oldest first; each is removed as it is taken.

    An inbox that is a symbolic link is not read (nothing in the folder it points to is taken,
    deleted or renamed); nor is a link inside it.
    """
    box = run_dir / INBOX_NAME
    try:
        box_fd = _open_box(box)
    except OSError:
        return []
    try:
        listing = os.listdir(box_fd if box_fd is not None else box)
        names = sorted(n for n in listing if n.endswith(".json") and not n.startswith("."))
    except OSError:
        names = []
    out: list[dict[str, Any]] = []
    try:
        for name in names:
            # By name in the folder's descriptor; by full path where there is none.
            at: str | Path = name if box_fd is not None else box / name
            try:
                st = os.stat(at, dir_fd=box_fd, follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            message = _read_message(at, box_fd)
            if message is None:
                with logged(log, "keeping an unreadable message aside"):
                    bad: str | Path = name + ".bad" if box_fd is not None else box / (name + ".bad")
                    os.replace(at, bad, src_dir_fd=box_fd, dst_dir_fd=box_fd)
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(at, dir_fd=box_fd)
            message["text"] = str(message.get("text") or "")[:MAX_WORDS_CHARS]
            message["id"] = str(message.get("id") or "")[:100]
            message["from"] = message.get("from") if message.get("from") in SOURCES else "api"
            out.append(message)
    finally:
        if box_fd is not None:
            os.close(box_fd)
    return out


# -- the run's side: the log, the live state and the inbox together -------------------------------------


class LiveRun:
    """One run's log, live state and inbox, for the process that runs the workflow.

    ``sink`` / ``on_step`` / ``line`` / ``goals`` record what the run says and pass it on to the
    front end's view (``view_sink`` …); a thread takes the inbox every ``POLL_S`` and applies each
    message to the run: ``answer`` to the channel (``channel.answer``), ``remark`` as an interrupt
    that resumes the same session with the words (``rt.interrupt``), ``stop`` as an interrupt that
    ends the step (recorded ``interrupted-by-human``, the session kept). ``heard`` is called with
    each message taken (a front end's view may say so).
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        front_end: str,
        start: dict[str, Any],
        view_sink: Callable[[Event], None] | None = None,
        heard: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.front_end = front_end
        self.view_sink = view_sink
        self.heard = heard
        self.channel: Any = None
        self.rt: Any = None
        self.state = LiveState(pid=os.getpid(), front_end=front_end, since=time.time(), boot=boot_id())
        self.log = EventLog(run_dir, start)
        self.state.run = self.log.run_id
        self._state_lock = threading.Lock()
        self._asks: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stopped = False
        self._save()

    def serve(self, channel: Any, rt: Any) -> None:
        """Start taking the inbox for this run's channel and runtime."""
        self.channel, self.rt = channel, rt
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="flower-inbox", daemon=True)
            self._thread.start()

    # -- what the run says -------------------------------------------------------------------------------

    def sink(self, event: Event) -> None:
        """The workflow's ``on_event``: record, update the live state, pass on. Never raises."""
        with logged(log, "live sink"):
            self.log.event(event)
            self._track(event)
        if self.view_sink is not None:
            self.view_sink(event)

    __call__ = sink

    def on_step(self, step: Any, result: Any) -> None:
        with logged(log, "live step"):
            self.log.record(
                "step",
                ok=bool(getattr(result, "ok", False)),
                num_turns=int(getattr(result, "num_turns", 0) or 0),
                cost_usd=float(getattr(result, "cost_usd", 0.0) or 0.0),
                duration_s=float(getattr(result, "duration_s", 0.0) or 0.0),
                error=str(getattr(result, "error", "") or ""),
                session_id=str(getattr(result, "session_id", "") or ""),
            )

    def line(self, segments: list[tuple[str, str]]) -> None:
        self.log.record("line", line=[[style, text] for style, text in segments])

    def goals(self, checks: list[str]) -> None:
        self.log.record("goals", checks=list(checks))

    def end(self, fields: dict[str, Any]) -> None:
        """The run is over: the ``end`` record (``fields``: how it ended, ``front.outcome.Outcome``'s
        record), the state ``ended``, the inbox closed."""
        self.log.record("end", **fields, stopped=self.stopped)
        with self._state_lock:
            self.state.state, self.state.asks = ENDED, []
        self._save()  # at once: a process that is going (a kernel's shutdown) may not outlive the join below
        self.close(ended=True)

    def close(self, *, ended: bool = False) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        with self._state_lock:
            if ended:
                self.state.state, self.state.asks = ENDED, []
        self._save()
        self.log.close()

    # -- the live state ---------------------------------------------------------------------------------

    def _track(self, event: Event) -> None:
        p = event.payload if isinstance(event.payload, dict) else {}
        changed = False
        with self._state_lock:
            if self.state.state == ENDED:
                return  # what a run still winding down says after its end is not its state
            if event.kind == "step":
                if p.get("judge"):
                    self.state.round = int(p.get("round") or 0)
                else:
                    self.state.step, self.state.round = event.text[:200], 0
                self.state.state = WAITING if self._asks else RUNNING
                changed = True
            elif event.kind == "ask" and p.get("kind") != "mail":
                ask_id = str(p.get("id") or "")
                if p.get("state") == "asked":
                    options = [str(o)[:500] for o in p.get("options") or []][:20]
                    self._asks[ask_id] = {"id": ask_id, "question": event.text[:4000], "options": options}
                else:
                    self._asks.pop(ask_id, None)
                self.state.asks = list(self._asks.values())
                self.state.state = WAITING if self._asks else RUNNING
                changed = True
            elif event.kind == "retry" and self.state.state != IDLE:
                self.state.state, changed = IDLE, True
            elif event.kind in ("text", "tool_call", "tool_result", "result") and self.state.state == IDLE:
                self.state.state, changed = (WAITING if self._asks else RUNNING), True
        if changed:
            self._save()

    def _save(self) -> None:
        with self._state_lock:
            self.state.updated = time.time()
            self.state.n = self.log.n
            data = json.dumps({k: v for k, v in self.state.to_dict().items() if k != "live"}, ensure_ascii=False)
        try:
            write_atomic(self.run_dir / LIVE_NAME, data.encode())
        except OSError as exc:
            log.warning("could not write %s: %s", LIVE_NAME, exc)

    # -- the inbox --------------------------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._stop.wait(POLL_S):
            with logged(log, "taking the inbox"):
                for message in take_inbox(self.run_dir):
                    self.apply(message)

    def apply(self, message: dict[str, Any]) -> None:
        """Carry out one message (see the class docstring) and record it as ``heard``."""
        op, text, ask_id = message["op"], message.get("text", ""), message.get("id", "")
        took, as_remark = True, False
        if op == "answer":
            pending = self.channel.pending() if self.channel is not None else []
            target = next((a for a in pending if a.id == ask_id), pending[0] if pending and not ask_id else None)
            took = target is not None and bool(self.channel.answer(target.id, text))
            ask_id = target.id if target is not None else ask_id
            # The question closed before the answer came (timed out, answered elsewhere): the words are
            # still the person's, so the agent gets them as a remark rather than never.
            as_remark = not took and bool(text.strip())
        if op == "remark" or as_remark:
            # Written down before it is said: a run killed before the words reached the model leaves
            # them in 需求.md, where the next run finds what its sessions never received.
            if self.channel is not None and text.strip():
                self.channel.amend(text)
            if self.rt is not None:
                self.rt.interrupt(text)
        elif op == "stop":
            self.stopped = True
            if self.rt is not None:
                self.rt.interrupt("", resume=False)
            if self.channel is not None:
                self.channel.cancel_all(STOP_REASON)
        record = {"op": op, "text": text[:TEXT_CHARS], "id": ask_id, "from": message.get("from", "api"), "took": took}
        if as_remark:
            record["as_remark"] = True
        self.log.record("heard", **record)
        if self.heard is not None:
            with logged(log, "heard"):
                self.heard(record)


STOP_REASON = "人让运行停下"  # what the agent's open question is settled with on a stop


# -- a front end's side: showing a run from its log ---------------------------------------------------


def heard_line(record: dict[str, Any], lang: str) -> list[tuple[str, str]]:
    """The view line of a ``heard`` record: who said what to the run."""
    from flower_magic.core.words import say

    source = record.get("from") if record.get("from") in SOURCES else "api"
    front = say(f"front_{source}", lang)
    op = record.get("op") if record.get("op") in OPS else "remark"
    text = str(record.get("text") or "")[:300]
    line = [("note", say(f"live_heard_{op}", lang, source=front, text=text))]
    if op == "answer" and not record.get("took", True):
        missed = "live_heard_as_remark" if record.get("as_remark") else "live_heard_missed"
        line.append(("dim", " " + say(missed, lang)))
    return line


class _Result:
    """A ``step`` record in the shape views read from a ``StepResult``."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.ok = bool(record.get("ok"))
        self.num_turns = int(record.get("num_turns") or 0)
        self.cost_usd = float(record.get("cost_usd") or 0.0)
        self.duration_s = float(record.get("duration_s") or 0.0)
        self.error = str(record.get("error") or "") or None
        self.session_id = str(record.get("session_id") or "")


def show(view: Any, record: dict[str, Any], lang: str) -> None:
    """Show one record in a view (``display.RunView``, ``terminal.TerminalView``: anything with
    ``__call__(event)``, ``on_step``, ``line`` and, optionally, ``set_goal_checks``). ``start`` and
    ``end`` are the caller's (``Watch``). Never raises."""
    kind = record.get("type")
    with logged(log, f"showing a {kind} record"):
        if kind == "event":
            data = record.get("event") or {}
            given = data.get("payload")
            payload: dict[str, Any] = given if isinstance(given, dict) else {}
            view(
                Event(
                    str(data.get("kind") or "unknown"),
                    str(data.get("text") or ""),
                    str(data.get("tool") or ""),
                    payload,
                )
            )
        elif kind == "step":
            view.on_step(None, _Result(record))
        elif kind == "line":
            view.line([(str(s), str(t)) for s, t in record.get("line") or []])
        elif kind == "goals" and hasattr(view, "set_goal_checks"):
            view.set_goal_checks([str(c) for c in record.get("checks") or []])
        elif kind == "heard":
            view.line(heard_line(record, lang))


class Watch:
    """Follow a run's log into a view: what it said so far, then what it says, until its ``end``
    record or until its process is gone without one (``gone``).

    ``on_end(record_or_None)`` is called once, from the following thread, when it is over.
    """

    def __init__(
        self,
        run_dir: Path,
        view: Any,
        lang: str,
        *,
        on_end: Callable[[dict[str, Any] | None], None] | None = None,
        poll_s: float = POLL_S,
        liveness_s: float = 1.0,
    ) -> None:
        self.run_dir, self.view, self.lang = run_dir, view, lang
        self.on_end = on_end
        self.poll_s, self.liveness_s = poll_s, liveness_s
        self.follower = Follower(run_dir)
        self.start: dict[str, Any] | None = None
        self.end: dict[str, Any] | None = None
        self.gone = False
        self.records = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def over(self) -> bool:
        return self.end is not None or self.gone

    def step(self) -> bool:
        """Show what is new; returns whether anything was."""
        records = self.follower.poll()
        for record in records:
            self.records += 1
            if record["type"] == "start":
                self.start = record
            elif record["type"] == "end":
                self.end = record
            else:
                show(self.view, record, self.lang)
        return bool(records)

    def run(self, stop: threading.Event | None = None) -> dict[str, Any] | None:
        """Follow here until the run is over or ``stop`` is set; returns the end record (or None)."""
        stop = stop or self._stop
        quiet_since = time.monotonic()
        while not self.over and not stop.is_set():
            if self.step():
                quiet_since = time.monotonic()
                continue
            if time.monotonic() - quiet_since >= self.liveness_s:
                quiet_since = time.monotonic()
                state = live_state(self.run_dir)
                if state is None or not state.live:
                    self.step()  # the last words before it went
                    self.gone = self.end is None
            stop.wait(self.poll_s)
        if self.over and self.on_end is not None:
            with logged(log, "watch end"):
                self.on_end(self.end)
        return self.end

    def follow(self) -> threading.Thread:
        """Follow in a daemon thread (``stop()`` ends it)."""
        self._thread = threading.Thread(target=self.run, name="flower-watch", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        self._stop.set()
