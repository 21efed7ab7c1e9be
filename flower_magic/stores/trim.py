"""Keeping resumed context small without losing anything: trimming and ephemeral expiry.

- **Trimming** (``TrimPolicy``): large tool results that do not fit a size budget are written to
  ``<workspace>/.flower/spill/<sha256[:16]>.txt`` and replaced by a pointer the agent can ``Read``.
  Nothing is lost: the spill file holds the exact text, and sessions.db keeps the original entry.
- **Expiry** (``EphemeralPolicy``): results of read-only "glance" shell commands (``git status``,
  ``ls``, ``cat`` …) older than the newest ``keep_recent`` are marked stale: what they showed may no
  longer be true, and the agent should look again rather than trust them.

The budget rule (the default): large results stay in context newest first while they fit in
``BUDGET_SHARE`` of the hand-off line; the first one that does not fit, and every older one, is
spilled. The results of the turn in progress (after the newest prompt, with no final answer yet:
a resume after an interrupt, an outage or a kill) are never spilled by the rule, only by an explicit
``force`` (a squeeze before a hand-off). The reference's count rule (keep the newest ``keep_recent``)
is still there: ``TrimPolicy(keep_recent=20)``.

Both rewrite only the content of a ``tool_result`` block; the block itself stays, so every
``tool_use`` keeps its result. Compaction summaries and meta entries are never touched. Neither
modifies the list it is given: an entry that changes is copied, the others are shared.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flower_magic.core import rundir
from flower_magic.core.durable import write_atomic
from flower_magic.stores.prune import INTERRUPT_NOTICES, is_api_error

Entry = dict[str, Any]

SPILL_DIRNAME = f"{rundir.WORKBENCH_DIRNAME}/{rundir.SPILL_DIRNAME}"  # RunDir.spill, relative to the workspace
SPILL_POINTER = "[这段工具输出有 {n} 字符,已原样存到 {path},需要时用 Read 读取]"
STALE_TEXT = "[{cmd} 的结果已过期(那是 {age} 次查看之前),现在的情况可能已经变了。需要的话重新执行]"
CMD_PREVIEW_CHARS = 60


# Old tool results (those of turns that have ended) may take at most this share of the hand-off line:
# 7.5K tokens under a 200K window's 150K line (about one large result), 37.5K under a 1M window's line,
# nothing large under a 40K window's 10K line. Why so little:
#   - The line must hold what cannot leave context: the start-up (system prompt and tool schemas, ~9K
#     tokens on the real API), the conversation's own text, which grows every round and is what a
#     hand-off is for, and the round in progress, whose results are never trimmed (the model is using
#     them). Old results are the one part that can leave without loss: the pointer brings each back
#     byte for byte, and only if it is needed; the model has already acted on them.
#   - Trimming rewrites the context where the oldest kept result was, so the prompt cache is lost from
#     there on at every resume that trims. Keeping about one round's worth puts that point at the last
#     round: everything before it stays cached.
# Measured in bench/bench_context_economy.py (6 wakes x 5 rounds of 20-40 KB reads, README).
BUDGET_SHARE = 0.05
# Tokens are counted as characters / 3: Claude Code's own estimate (front/options.py). Real English text
# runs nearer 4 characters a token, so the budget keeps a little less than it allows: the safe side.
CHARS_PER_TOKEN = 3
# The reference's count rule, kept for compatibility: TrimPolicy(keep_recent=REFERENCE_KEEP_RECENT).
REFERENCE_KEEP_RECENT = 20


def budget_for_line(at_tokens: int) -> int:
    """The token budget for old tool results under a hand-off line of ``at_tokens``."""
    return max(0, int(at_tokens * BUDGET_SHARE))


@dataclass
class TrimPolicy:
    """Spill large old tool results to files.

    Attributes:
        budget_tokens: old large results stay, newest first, while they fit in this many tokens
            (``CHARS_PER_TOKEN`` characters each). None: ``BUDGET_SHARE`` of the hand-off line of the
            default window (the store a ``Runtime`` uses sizes it from the runtime's own line: ``sized``).
        keep_recent: the reference's count rule instead of a budget: the newest ``keep_recent`` large
            results stay, whatever their size (None = the budget rule).
        min_chars: a result shorter than this is never spilled (a pointer would save little).
    """

    enabled: bool = True
    budget_tokens: int | None = None
    keep_recent: int | None = None
    min_chars: int = 2000
    spill_dirname: str = SPILL_DIRNAME

    def budget_chars(self) -> int:
        """The budget in characters (the default window's when ``budget_tokens`` is None)."""
        tokens = self.budget_tokens
        if tokens is None:
            from flower_magic.core.handoff import HandoffPolicy

            tokens = budget_for_line(HandoffPolicy().at)
        return max(0, tokens) * CHARS_PER_TOKEN


def sized(trim: Any, line: int | None = None) -> TrimPolicy:
    """``trim`` (a ``TrimPolicy`` or a bool) as a policy whose budget rule has a budget: ``BUDGET_SHARE``
    of ``line`` (the default window's line when None) unless it names a budget or the count rule."""
    policy = trim if isinstance(trim, TrimPolicy) else TrimPolicy(enabled=bool(trim))
    if policy.budget_tokens is None and policy.keep_recent is None and line is not None:
        policy = replace(policy, budget_tokens=budget_for_line(line))
    return policy


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
#
# The rule: a command is a glance only if every piece of it is a known read-only command whose
# arguments cannot make it write or run something else. Stricter than the reference is fine (a glance
# result kept is only a few hundred characters); laxer is a bug. Three layers:
#   1. text checks on the raw command (the reference's: substitution, redirects, background jobs,
#      ``_MUTATES`` words anywhere), plus subshells, open quotes and ``${…}`` beyond ``${NAME}``;
#   2. every piece of a list or pipeline starts with a known read-only verb;
#   3. for verbs with dangerous options, their words as the shell passes them (``shlex``), so that
#      quoting (``"-i"``, ``\-delete``) cannot hide an option; and no word may expand into an unseen
#      option (``$X``, ``$'-o'``, globs, braces).
# Some ``_MUTATES`` alternatives (sed -i, sort -o, git --force …) are also caught, more precisely, by
# layer 3; they stay for parity with the reference.

_SUBSTITUTION = re.compile(r"\$\(|`|<\(|>\(")
# ${NAME} is plain; anything else inside ${…} can evaluate arithmetic (``${X:$N}``, ``${a[$N]}``, which
# runs a command substitution held in N) or expand a prompt string (``${X@P}``).
_PARAM_EXPANSION = re.compile(r"\$\{(?![A-Za-z_][A-Za-z0-9_]*\})")
_MUTATES = re.compile(
    r"""\bxargs\b|(?:^|\s)-exec(?:dir)?\b|\beval\b|\bsource\b|(?:^|[;&|]\s*)\.\s|\btee\b|\bexec\b
      |(?:^|\s)-delete\b|(?:^|\s)-fprint0?\b|(?:^|\s)-fprintf\b|(?:^|\s)-fls\b|(?:^|\s)-ok(?:dir)?\b|(?:^|\s)-newer
      |\bsed\b[^|;&\n]*\s-[a-zA-Z]*i|\bsed\b[^|;&\n]*--in-place
      |\bsort\b[^|;&\n]*\s-[a-zA-Z]*o|\bsort\b[^|;&\n]*--output
      |\bawk\b[^|;&\n]*(?:system\s*\(|print[^|;&\n]*>|ENVIRON|getline)
      |\bgit\b[^|;&\n]*\s--(?:force|hard|prune|output)\b|\bgit\b[^|;&\n]*\s-f\b
      |\btree\b[^|;&\n]*\s-o\b|\bdate\b[^|;&\n]*\s(?:-s|--set)\b""",
    re.X | re.I,
)
# Only whole redirect words: ``>&2file`` and ``>/dev/null2`` write files.
_END = r"(?=\s|$|[;&|])"
_SAFE_REDIRECTS = re.compile(r"\d?>&(?:\d|-)" + _END + r"|&>\s*/dev/null" + _END + r"|\d?>>?\s*/dev/null" + _END)
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
_BRANCH_LIST_FLAG = re.compile(
    r"-[arlv]|-vv|--(?:list|all|remotes|show-current|merged|no-merged|contains|no-contains|verbose|no-color|color"
    r"|format=.*)"
)
_GIT_REMOTE = re.compile(r"^git\s+remote(?:\s+-v|\s+(?:show|get-url)\b.*)?$")
# A sed script made only of commands that print, edit the pattern space or quit: no w/W/e commands,
# no s///w or s///e flags, no r/R, labels or text commands (refused rather than parsed).
_SED_ADDRESS = r"(?:\d+(?:~\d+)?|\$|/(?:\\.|[^\\/\n])*/[IM]*)"
_SED_SAFE_SCRIPT = re.compile(
    rf"(?:[\s;]*(?:{_SED_ADDRESS}(?:[ \t]*,[ \t]*(?:[+~]\d+|{_SED_ADDRESS}))?)?[ \t]*!?[ \t]*"
    r"(?:[pPdDnNgGhHxzF={}]|[lqQ][ \t]*\d*"
    r"|s(?P<s>[^\\\n\w\s])(?:\\.|(?!(?P=s))[^\\\n])*(?P=s)(?:\\.|(?!(?P=s))[^\\\n])*(?P=s)[gpiImM\d]*"
    r"|y(?P<y>[^\\\n\w\s])(?:\\.|(?!(?P=y))[^\\\n])*(?P=y)(?:\\.|(?!(?P=y))[^\\\n])*(?P=y)))*[\s;]*"
)
_SED_FLAG = re.compile(
    r"-[nErsuz]+e?|--(?:quiet|silent|regexp-extended|separate|unbuffered|null-data|posix|debug|sandbox)"
)


def _shell_text(cmd: str) -> tuple[str, str] | None:
    """Two views of ``cmd``: the unquoted text (quoted and backslash-escaped characters blanked), and
    the text where ``$`` still expands (single-quoted and escaped characters blanked). None if a quote
    is left open."""
    bare, live = list(cmd), list(cmd)
    quote, escaped = "", False
    for i, ch in enumerate(cmd):
        if escaped or quote == "'" or ch == "\\" or (ch in "'\"" and not quote) or (quote == '"' and ch == '"'):
            bare[i] = live[i] = " "
        elif quote == '"':
            bare[i] = " "
        if escaped:
            escaped = False
        elif quote:
            quote = "" if ch == quote else quote
            escaped = quote == '"' and ch == "\\"
        elif ch in "'\"":
            quote = ch
        else:
            escaped = ch == "\\"
    return None if quote else ("".join(bare), "".join(live))


def _flags(word: str) -> str:
    """The letters of a cluster of short options (``-ni`` → ``ni``); empty for anything else."""
    return word[1:] if word.startswith("-") and not word.startswith("--") else ""


def _long(word: str) -> str:
    """The name of a long option as typed (``--out=f`` → ``out``; getopt accepts any unique prefix)."""
    return word[2:].partition("=")[0] if word.startswith("--") else ""


def _sed_reads_only(args: list[str]) -> bool:
    scripts: list[str] = []
    operands: list[str] = []
    sandbox = False  # --sandbox makes sed itself refuse e, w and r
    words = iter(args)
    for word in words:
        if word.startswith("--expression="):
            scripts.append(word.partition("=")[2])
        elif word in ("-e", "--expression") or (_SED_FLAG.fullmatch(word) and word.endswith("e")):
            script = next(words, None)  # -e, or a cluster ending in e (-ne): the script is the next word
            if script is None:
                return False
            scripts.append(script)
        elif _SED_FLAG.fullmatch(word):
            sandbox = sandbox or word == "--sandbox"
        elif word.startswith("-") and word != "-":
            return False  # -i/--in-place (even as --in), -f (a script we cannot see), -l, anything unknown
        else:
            operands.append(word)
    scripts = scripts or operands[:1]
    return bool(scripts) and (sandbox or all(_SED_SAFE_SCRIPT.fullmatch(s) for s in scripts))


def _awk_reads_only(args: list[str]) -> bool:
    words = iter(args)
    for word in words:
        if word in ("-F", "-v"):
            next(words, None)
        elif not word.startswith(("-F", "-v")):
            # -f/-E (a program file), -i/-l (gawk: in place, extensions), -e, long options; else the program.
            # In it: @ (gawk's @load/@include and @f() with f = "system") and | (a pipe to a command).
            return not word.startswith("-") and not re.search(r"system|getline|ENVIRON|@|\||>", word)
    return False


def _sort_reads_only(args: list[str]) -> bool:
    # -o and --output (also as --out, --o: getopt takes prefixes); --compress-program runs a program.
    return not any(
        "o" in _flags(w) or (_long(w) and "output".startswith(_long(w))) or _long(w)[:1] == "c" for w in args
    )


def _uniq_reads_only(args: list[str]) -> bool:
    """``uniq IN OUT`` writes OUT: at most one operand (``-`` is one; the word after -f, -s or -w is a number)."""
    after = ["", *args][: len(args)]
    operands = [w for w, before in zip(args, after, strict=True) if before not in ("-f", "-s", "-w") and w[:2] != "--"]
    return len([w for w in operands if w == "-" or not w.startswith("-")]) <= 1


def _date_reads_only(args: list[str]) -> bool:
    """``date -s``/``--set`` and ``date MMDDhhmm`` set the clock."""
    words = iter(args)
    for word in words:
        if _long(word):
            if "set".startswith(_long(word)):
                return False
            if _long(word) in ("date", "file", "reference") and "=" not in word:
                next(words, None)
        elif _flags(word):
            for k, letter in enumerate(_flags(word)):
                if letter == "s":
                    return False
                if letter in "dfrI":  # takes an argument: the rest of the word, or the next word
                    if letter != "I" and k == len(word) - 2:
                        next(words, None)
                    break
        elif not word.startswith("+"):
            return False
    return True


def _git_reads_only(args: list[str]) -> bool:
    sub, rest = (args[0].lower(), args[1:]) if args else ("", [])
    if any(w == "-f" or _long(w).startswith(("force", "hard", "prune", "output")) for w in rest):
        return False
    if sub == "hash-object":
        return not any("w" in _flags(w) for w in rest)  # -w writes the object
    if sub == "reflog":
        return not {"expire", "delete"} & set(rest)
    if sub == "symbolic-ref":  # one name reads; a second operand, -d or -m sets or deletes the ref
        operands = [w for w in rest if not w.startswith("-")]
        return len(operands) <= 1 and all(
            w in ("-q", "--quiet", "--short", "--recurse", "--no-recurse") for w in rest if w not in operands
        )
    return True


def _without_flag(letters: str, long_prefix: str) -> Callable[[list[str]], bool]:
    return lambda args: not any(set(letters) & set(_flags(w)) or _long(w).startswith(long_prefix) for w in args)


_ARGUMENT_RULES: dict[str, Callable[[list[str]], bool]] = {
    "sed": _sed_reads_only,
    "awk": _awk_reads_only,
    "find": lambda args: (
        not any(w.lower().startswith(("-exec", "-ok", "-delete", "-fprint", "-fls", "-newer")) for w in args)
    ),
    "sort": _sort_reads_only,
    "uniq": _uniq_reads_only,
    "date": _date_reads_only,
    "git": _git_reads_only,
    "rg": _without_flag("", "pre"),  # --pre runs a program on every file
    "tree": _without_flag("oR", "o"),  # -o FILE writes; -R writes 00Tree.html in every folder
    "file": _without_flag("C", "c"),  # -C compiles a magic file
    "ss": _without_flag("K", "k"),  # -K kills sockets
}


def _words_are_literal(seg: str) -> bool:
    """No word of ``seg`` can expand into an option we did not see: no ``$`` (``$X`` holding ``-delete``,
    ``$'-o'``), no glob (``*`` matching a file named ``-delete``), no braces (``-{delete,x}``)."""
    text = _shell_text(seg)
    return text is not None and "$" not in text[1] and not set("*?[{}") & set(text[0])


def _segment_is_glance(seg: str) -> bool:
    seg = seg.strip()
    if _TYPE.match(seg) or _ENV_BARE.match(seg):
        return True
    if _GIT_REMOTE.match(seg):
        return _words_are_literal(seg)
    branch = _GIT_BRANCH.match(seg)
    if branch:
        args = branch.group("rest").split()
        listing = "-l" in args or "--list" in args
        return _words_are_literal(seg) and all(
            _BRANCH_LIST_FLAG.fullmatch(a) or (listing and not a.startswith("-")) for a in args
        )
    if not EPHEMERAL_CMD.match(seg):
        return False
    try:
        words = shlex.split(seg)
    except ValueError:
        return False
    rule = _ARGUMENT_RULES.get(words[0].lower())
    return rule is None or (_words_are_literal(seg) and rule(words[1:]))


def is_ephemeral(cmd: str) -> bool:
    """True for a shell command that only looks (its result can go stale; running it again is safe).

    Deliberately narrow: command or process substitution, parameter expansions other than ``${NAME}``,
    redirects other than to ``/dev/null`` or between descriptors, background jobs, subshells and
    function definitions, leading variable assignments, and anything that can write or run another
    program (``xargs``, ``find -exec``, ``tee``, ``sed -i``/``w``/``e``, ``sort -o``, ``awk`` with
    ``system``/``-f``, ``git branch -D``, ``--force`` …) are never ephemeral, and every piece of a
    pipeline or command list must be a known read-only command. For commands that have dangerous
    options, a word that could expand into one (``$X``, ``$'…'``, a glob, braces) is refused too.

    Not guaranteed: programs a read-only command runs from configuration rather than from its
    arguments (a repository's ``diff.external`` or ``core.fsmonitor`` run on ``git diff``/``git status``).
    """
    cmd = cmd.strip() if isinstance(cmd, str) else ""
    if not cmd or _SUBSTITUTION.search(cmd) or _PARAM_EXPANSION.search(cmd) or _MUTATES.search(cmd):
        return False
    stripped = _SAFE_REDIRECTS.sub(" ", cmd)
    if "<" in stripped or ">" in stripped or "&" in stripped.replace("&&", " "):
        return False  # a redirect to a file, or a background job
    text = _shell_text(stripped)
    if text is None or "(" in text[0] or ")" in text[0]:
        return False  # an open quote, a subshell, or a function definition (``ls () ( rm x )``)
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


# (entry index, block index, block, plain text)
_Site = tuple[int, int, dict[str, Any], str]


def _result_sites(entries: list[Entry]) -> list[_Site]:
    sites: list[_Site] = []
    for i, entry in enumerate(entries):
        msg = entry.get("message")
        if _protected(entry) or not isinstance(msg, dict) or not isinstance(msg.get("content"), list):
            continue
        for j, block in enumerate(msg["content"]):
            if isinstance(block, dict) and block.get("type") == "tool_result":
                text = _plain_text(block.get("content"))
                if text is not None:
                    sites.append((i, j, block, text))
    return sites


class _Rewrite:
    """A copy of a transcript in which only the entries whose results change are copied."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = list(entries)
        self._owned: set[int] = set()
        self.rewritten: list[str] = []

    def replace(self, i: int, j: int, content: str) -> None:
        if i not in self._owned:
            entry = dict(self.entries[i])
            entry["message"] = {**entry["message"], "content": list(entry["message"]["content"])}
            self.entries[i] = entry
            self._owned.add(i)
            if entry.get("uuid"):
                self.rewritten.append(entry["uuid"])
        blocks = self.entries[i]["message"]["content"]
        blocks[j] = {**blocks[j], "content": content}


def expire(entries: list[Entry], policy: EphemeralPolicy) -> tuple[list[Entry], list[str]]:
    """Mark old glance results stale.

    Returns:
        A new list (``entries`` is not modified; an entry that changes is copied, the others are
        shared) and the uuids of the entries rewritten.
    """
    # One pass over a long session: Bash commands by call id, and the small plain-text results.
    commands: dict[Any, str] = {}
    candidates: list[tuple[int, int, Any]] = []
    for i, entry in enumerate(entries):
        msg = entry.get("message")
        content = msg.get("content") if isinstance(msg, dict) else None
        if not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "tool_use" and block.get("name") == "Bash":
                cmd = (block.get("input") or {}).get("command")
                if isinstance(cmd, str):
                    commands[str(block.get("id"))] = cmd
            elif kind == "tool_result" and not _protected(entry):
                text = _plain_text(block.get("content"))
                if text is not None and len(text) <= policy.max_chars:
                    candidates.append((i, j, block.get("tool_use_id")))
    # A session repeats its few glance commands thousands of times: judge each text once.
    verdicts = {cmd: is_ephemeral(cmd) for cmd in set(commands.values())}
    sites = [(i, j, tid) for i, j, tid in candidates if tid in commands and verdicts[commands[tid]]]
    old = sites[: max(0, len(sites) - policy.keep_recent)]
    work = _Rewrite(entries)
    for n, (i, j, tid) in enumerate(old):
        work.replace(i, j, policy.placeholder(commands[tid], len(sites) - n))
    return work.entries, work.rewritten


def spill_path(workspace: Path, text: str, policy: TrimPolicy) -> Path:
    """Where a spilled result lives: named by the first 16 hex digits of its UTF-8 text's sha256."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return workspace / policy.spill_dirname / f"{digest}.txt"


def _is_prompt(entry: Entry) -> bool:
    """A message someone sent the model (a person, a step, the runtime): a user entry with text and no
    tool result, that is neither the CLI's own meta text nor an interrupt notice."""
    if entry.get("type") != "user" or _protected(entry) or entry.get("isSidechain"):
        return False
    msg = entry.get("message")
    content = msg.get("content") if isinstance(msg, dict) else None
    if isinstance(content, str):
        return bool(content.strip()) and not _is_notice(content)
    if not isinstance(content, list) or not content:
        return False
    kinds = {b.get("type") for b in content if isinstance(b, dict)}
    if "tool_result" in kinds or "text" not in kinds:
        return False
    return not all(_is_notice(str(b.get("text", ""))) for b in content if isinstance(b, dict))


def _is_notice(text: str) -> bool:
    return text.strip().startswith(INTERRUPT_NOTICES)


def _ends_turn(entry: Entry) -> bool:
    """The model's final answer: an assistant message with no tool call (not a synthetic error). An
    answer cut while streaming (``stop_reason`` null) or a text block ahead of a call (``tool_use``)
    is not one; entries without the field (older CLIs) are."""
    msg = entry.get("message")
    if entry.get("type") != "assistant" or entry.get("isSidechain") or not isinstance(msg, dict) or is_api_error(entry):
        return False
    content = msg.get("content")
    if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content):
        return False
    return msg.get("stop_reason", "end_turn") not in (None, "tool_use")


def turn_start(entries: list[Entry]) -> int | None:
    """Index of the prompt that opened the turn still in progress, or None when the last turn ended.

    A turn is in progress when no final answer follows the newest prompt: the session was cut by an
    interrupt, an outage, a kill or a hand-off line while the model was still working.
    """
    for i in range(len(entries) - 1, -1, -1):
        entry = entries[i]
        if _ends_turn(entry):
            return None
        if _is_prompt(entry):
            return i
    return None


@dataclass
class LargeResult:
    """A tool result big enough to spill: its call id and tool, and its size."""

    tool_use_id: str
    tool: str
    chars: int


def large_results(entries: list[Entry], policy: TrimPolicy) -> list[LargeResult]:
    """Every plain-text tool result of at least ``policy.min_chars`` characters, oldest first."""
    tools = {
        str(b.get("id")): str(b.get("name") or "")
        for e in entries
        if e.get("type") == "assistant"
        for b in ((e.get("message") or {}).get("content") or [])
        if isinstance(b, dict) and b.get("type") == "tool_use"
    }
    found = []
    for _, _, block, text in _result_sites(entries):
        if len(text) >= policy.min_chars:
            tid = str(block.get("tool_use_id"))
            found.append(LargeResult(tid, tools.get(tid, ""), len(text)))
    return found


def _kept_by_rule(sites: list[_Site], in_turn: list[bool], policy: TrimPolicy) -> set[int]:
    """Positions (in ``sites``) the policy keeps in context."""
    if policy.keep_recent is not None:  # the reference's count rule, exactly
        return set(range(max(0, len(sites) - policy.keep_recent), len(sites)))
    budget = policy.budget_chars()
    kept = {n for n, current in enumerate(in_turn) if current}
    used = sum(len(sites[n][3]) for n in kept)
    for n in range(len(sites) - 1, -1, -1):
        if n in kept:
            continue
        size = len(sites[n][3])
        if used + size > budget:
            break  # this one and every older one go: what stays is the newest stretch, as a reader expects
        kept.add(n)
        used += size
    return kept


def trim(
    entries: list[Entry],
    policy: TrimPolicy,
    workspace: Path,
    *,
    write: bool = True,
    force: frozenset[str] | set[str] = frozenset(),
) -> tuple[list[Entry], dict[str, Any]]:
    """Spill large old tool results. ``write=False`` computes the same view without touching the disk
    (for read-only viewers).

    A result whose spill file cannot be written stays in context as it was (a pointer to a file that
    does not exist would lose it); resuming goes on, and the report counts it in ``unspilled``.

    Args:
        force: tool_use ids whose large results are spilled whatever the rule says, those of the turn
            in progress included (a squeeze: the session is over its hand-off line).

    Returns:
        A new list (``entries`` is not modified; an entry that changes is copied, the others are
        shared) and a report: ``cleared``, ``kept``, ``protected`` (kept because their turn is in
        progress), ``chars_saved``, ``unspilled``, ``rewritten`` (entry uuids), ``spilled`` (tool_use
        ids now behind a pointer).
    """
    sites = [s for s in _result_sites(entries) if len(s[3]) >= policy.min_chars]
    start = turn_start(entries) if policy.keep_recent is None else None
    in_turn = [start is not None and site[0] > start for site in sites]
    kept = _kept_by_rule(sites, in_turn, policy)
    if force:
        kept = {n for n in kept if str(sites[n][2].get("tool_use_id")) not in force}
    old = [site for n, site in enumerate(sites) if n not in kept]
    saved = unspilled = 0
    spilled: list[str] = []
    work = _Rewrite(entries)
    for i, j, block, text in old:
        path = spill_path(workspace, text, policy)
        if write and not path.exists():
            try:
                write_atomic(path, text.encode("utf-8", "surrogatepass"))
            except OSError:
                unspilled += 1
                continue
        pointer = SPILL_POINTER.format(n=len(text), path=path.relative_to(workspace).as_posix())
        work.replace(i, j, pointer)
        saved += len(text) - len(pointer)
        spilled.append(str(block.get("tool_use_id")))
    report = {
        "cleared": len(old) - unspilled,
        "kept": len(sites) - len(old) + unspilled,
        "protected": sum(1 for n in kept if in_turn[n]),
        "chars_saved": saved,
        "unspilled": unspilled,
        "rewritten": work.rewritten,
        "spilled": spilled,
    }
    return work.entries, report
