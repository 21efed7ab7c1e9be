"""Keeping resumed context small without losing anything: trimming and ephemeral expiry.

- **Trimming** (``TrimPolicy``): large tool results older than the newest ``keep_recent`` are written
  to ``<workspace>/.flower/spill/<sha256[:16]>.txt`` and replaced by a pointer the agent can ``Read``.
  Nothing is lost: the spill file holds the exact text, and sessions.db keeps the original entry.
- **Expiry** (``EphemeralPolicy``): results of read-only "glance" shell commands (``git status``,
  ``ls``, ``cat`` …) older than the newest ``keep_recent`` are marked stale: what they showed may no
  longer be true, and the agent should look again rather than trust them.

Both rewrite only the content of a ``tool_result`` block; the block itself stays, so every
``tool_use`` keeps its result. Compaction summaries and meta entries are never touched.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flower_magic.core.durable import write_atomic

Entry = dict[str, Any]

SPILL_DIRNAME = ".flower/spill"
SPILL_POINTER = "[这段工具输出有 {n} 字符,已原样存到 {path},需要时用 Read 读取]"
STALE_TEXT = "[{cmd} 的结果已过期(那是 {age} 次查看之前),现在的情况可能已经变了。需要的话重新执行]"
CMD_PREVIEW_CHARS = 60


@dataclass
class TrimPolicy:
    """Spill large old tool results to files.

    Attributes:
        keep_recent: the newest large results stay in context as they are.
        min_chars: a result shorter than this is never spilled (a pointer would save little).
    """

    enabled: bool = True
    keep_recent: int = 20
    min_chars: int = 2000
    spill_dirname: str = SPILL_DIRNAME


@dataclass
class EphemeralPolicy:
    """Mark results of old read-only shell commands as stale.

    Attributes:
        keep_recent: the newest glance results stay as they are.
        max_chars: a longer result is left alone (trimming handles large ones).
    """

    enabled: bool = True
    keep_recent: int = 6
    max_chars: int = 2000
    text: str = STALE_TEXT

    def placeholder(self, cmd: str, age: int) -> str:
        first = (cmd.strip().splitlines() or [""])[0][:CMD_PREVIEW_CHARS]
        return self.text.format(cmd=f"`{first}`", age=age)


# -- is_ephemeral ------------------------------------------------------------------------------------

_SUBSTITUTION = re.compile(r"\$\(|`|<\(|>\(")
_MUTATES = re.compile(
    r"""\bxargs\b|(?:^|\s)-exec(?:dir)?\b|\beval\b|\bsource\b|(?:^|[;&|]\s*)\.\s|\btee\b|\bexec\b
      |(?:^|\s)-delete\b|(?:^|\s)-fprint0?\b|(?:^|\s)-fprintf\b|(?:^|\s)-fls\b|(?:^|\s)-ok(?:dir)?\b|(?:^|\s)-newer
      |\bsed\b[^|;&]*\s-[a-zA-Z]*i|\bsed\b[^|;&]*--in-place
      |\bsort\b[^|;&]*\s-[a-zA-Z]*o|\bsort\b[^|;&]*--output
      |\bawk\b[^|;&]*(?:system\s*\(|print[^|;&]*>|ENVIRON|getline)
      |\bgit\b[^|;&]*\s--(?:force|hard|prune|output)\b|\bgit\b[^|;&]*\s-f\b
      |\btree\b[^|;&]*\s-o\b|\bdate\b[^|;&]*\s(?:-s|--set)\b""",
    re.X | re.I,
)
_SAFE_REDIRECTS = re.compile(r"\d?>&\d|&>\s*/dev/null|\d?>>?\s*/dev/null")
_SPLIT = re.compile(r"&&|\|\||;|\||\n")
_GIT_READ = (
    r"status|diff|log|show|stash\s+list|worktree\s+list|rev-parse|describe|ls-files|blame|shortlog|reflog"
    r"|cherry|for-each-ref|symbolic-ref|whatchanged|hash-object|cat-file|count-objects|check-ignore|var"
    r"|config\s+--get(?:-all|-regexp)?"
)
EPHEMERAL_CMD = re.compile(
    r"^(?:git\s+(?:" + _GIT_READ + r")"
    r"|ls|ll|dir|pwd|df|du|free|uptime|date|whoami|id|printenv"
    r"|ps|top|htop|jobs|lsof|netstat|ss|pgrep|systemctl\s+status|docker\s+(?:ps|images|stats)|kubectl\s+get"
    r"|cat|head|tail|wc|stat|file|find|tree|echo"
    r"|command\s+-[vV]|which|whereis|uname|arch|locale|nproc|getconf|sw_vers"
    r"|grep|egrep|fgrep|rg|sort|uniq|cut|tr|awk|sed|column|jq|nl|rev|comm|diff)(?=\s|$)",
    re.I,
)
_TYPE = re.compile(r"^type(?:\s+-[apftP]+)*\s+[\w.+-]+$")
_ENV_BARE = re.compile(r"^(?:env|hostname)(?:\s+-[a-zA-Z]+)*$")  # env/hostname with an argument run/change things
_GIT_BRANCH = re.compile(r"^git\s+branch(?P<rest>(?:\s+\S+)*)$")
_BRANCH_LIST_FLAGS = {
    "-a",
    "-r",
    "-l",
    "-v",
    "-vv",
    "--list",
    "--all",
    "--remotes",
    "--show-current",
    "--merged",
    "--no-merged",
    "--contains",
    "--no-contains",
    "--verbose",
    "--no-color",
    "--color",
}
_GIT_REMOTE = re.compile(r"^git\s+remote(?:\s+-v|\s+(?:show|get-url)\b.*)?$")
_SED_WRITES = re.compile(r"""(?:^|[;{}'"\s])[wWe]\s+\S|(?:^|[;{}'"\s])[wW]$""")


def _segment_is_glance(seg: str) -> bool:
    seg = seg.strip()
    if not seg:
        return False
    if _TYPE.match(seg) or _ENV_BARE.match(seg) or _GIT_REMOTE.match(seg):
        return True
    branch = _GIT_BRANCH.match(seg)
    if branch:
        args = branch.group("rest").split()
        listing = any(a in ("-l", "--list") for a in args)
        return all(
            a in _BRANCH_LIST_FLAGS or (listing and not a.startswith("-")) or a.startswith("--format=") for a in args
        )
    if seg.split()[0].lower() == "sed" and _SED_WRITES.search(seg[3:]):
        return False
    return bool(EPHEMERAL_CMD.match(seg))


def is_ephemeral(cmd: str) -> bool:
    """True for a shell command that only looks (its result can go stale; running it again is safe).

    Deliberately narrow: command or process substitution, redirects other than to ``/dev/null``,
    background jobs, and anything that can write (``xargs``, ``-exec``, ``tee``, ``sed -i``,
    ``sort -o``, ``git branch -D``, ``--force`` …) are never ephemeral, and every piece of a
    pipeline or command list must be a known read-only command.
    """
    if not cmd or not cmd.strip():
        return False
    if _SUBSTITUTION.search(cmd) or _MUTATES.search(cmd):
        return False
    stripped = _SAFE_REDIRECTS.sub(" ", cmd)
    if "<" in stripped or ">" in stripped:
        return False
    if "&" in stripped.replace("&&", " "):
        return False
    return all(_segment_is_glance(seg) for seg in _SPLIT.split(stripped))


# -- rewriting ----------------------------------------------------------------------------------------


def _protected(entry: Entry) -> bool:
    return bool(entry.get("isCompactSummary") or entry.get("isMeta"))


def _plain_text(content: Any) -> str | None:
    """The text of a tool result made only of text (None if it holds images or documents)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "text":
                return None
            parts.append(str(block.get("text", "")))
        return "\n".join(parts)
    return None


def _result_sites(entries: list[Entry]) -> list[tuple[Entry, dict[str, Any], str]]:
    sites = []
    for entry in entries:
        msg = entry.get("message")
        if _protected(entry) or not isinstance(msg, dict) or not isinstance(msg.get("content"), list):
            continue
        for block in msg["content"]:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                text = _plain_text(block.get("content"))
                if text is not None:
                    sites.append((entry, block, text))
    return sites


def bash_commands(entries: list[Entry]) -> dict[str, str]:
    """tool_use id → command, for every Bash call in the transcript."""
    out: dict[str, str] = {}
    for entry in entries:
        msg = entry.get("message")
        if not isinstance(msg, dict) or not isinstance(msg.get("content"), list):
            continue
        for block in msg["content"]:
            if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") == "Bash":
                cmd = (block.get("input") or {}).get("command")
                if isinstance(cmd, str):
                    out[str(block.get("id"))] = cmd
    return out


def expire(entries: list[Entry], policy: EphemeralPolicy) -> tuple[list[Entry], list[str]]:
    """Mark old glance results stale (in place). Returns the entries and uuids rewritten."""
    commands = bash_commands(entries)
    sites = [
        (e, b, t)
        for e, b, t in _result_sites(entries)
        if b.get("tool_use_id") in commands and is_ephemeral(commands[b["tool_use_id"]]) and len(t) <= policy.max_chars
    ]
    old = sites[: max(0, len(sites) - policy.keep_recent)]
    rewritten: list[str] = []
    for i, (entry, block, _) in enumerate(old):
        block["content"] = policy.placeholder(commands[block["tool_use_id"]], len(sites) - i)
        if entry.get("uuid"):
            rewritten.append(entry["uuid"])
    return entries, rewritten


def spill_path(workspace: Path, text: str, policy: TrimPolicy) -> Path:
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    return workspace / policy.spill_dirname / f"{digest}.txt"


def trim(
    entries: list[Entry], policy: TrimPolicy, workspace: Path, *, write: bool = True
) -> tuple[list[Entry], dict[str, Any]]:
    """Spill large old tool results (in place). ``write=False`` computes the same view without
    touching the disk (for read-only viewers). Returns the entries and a report."""
    sites = [(e, b, t) for e, b, t in _result_sites(entries) if len(t) >= policy.min_chars]
    old = sites[: max(0, len(sites) - policy.keep_recent)]
    saved = 0
    rewritten: list[str] = []
    for entry, block, text in old:
        path = spill_path(workspace, text, policy)
        if write and not path.exists():
            write_atomic(path, text.encode("utf-8"))
        pointer = SPILL_POINTER.format(n=len(text), path=path.relative_to(workspace).as_posix())
        block["content"] = pointer
        saved += len(text) - len(pointer)
        if entry.get("uuid"):
            rewritten.append(entry["uuid"])
    return entries, {"cleared": len(old), "kept": len(sites) - len(old), "chars_saved": saved, "rewritten": rewritten}
