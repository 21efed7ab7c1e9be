"""Context economy on a long, tool-heavy run (issue 13): what every worker request carries, wake by wake.

Reproduces the run of issue 13 with real parts: the real ``flower`` command (the default workflow:
clarify, goals, then judged work rounds) and the real bundled Claude Code CLI, against the scripted fake
Messages API in this process. 6 wakes x 5 rounds; in each round the worker reads one 20-40 KB file
(``data/partNN.txt``), looks at its size, writes a short note and reports; the judge rules "not yet,
part NN+1 is still missing" until the last round. Trimming on and off, with a 200K and a 40K window.

Prints, per configuration: the context bytes of each worker request per wake (system prompt + messages,
as JSON; the tool schemas, the same in every request, are left out and printed once), the total over
all worker requests, hand-offs (where, and the most in one round), squeezes, sessions, whether the judge
ran each round, any step that stopped, its cause and whether that cause is the real one (checked against
what the fake API saw), and whether each wake opened with the verdict the previous one ended on. Then the
trimmed run against the untrimmed one for each window. Asserts nothing.

The fake API counts system prompt and messages as input tokens, as in the run of issue 13;
``--count-tools`` adds the tool schemas, as the real API does (a fresh session then starts ~7K tokens
higher).

    python bench/bench_context_economy.py [--wakes 6] [--rounds 5] [--windows 200000,40000]
        [--trim on,off] [--seed 13] [--count-tools] [--keep DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from flower_magic.core import manifest
from flower_magic.core.handoff import WINDOW_TOO_SMALL, ContextStop
from flower_magic.testing import FakeAnthropic, Reply, Request, text, tool_use
from flower_magic.testing.roles import role_of
from flower_magic.testing.server import CHARS_PER_TOKEN

TASK = "把 data/ 里的各个部分逐个读完,每部分在 notes/ 里写一段摘要"
BRIEF = """## 目标
把 data/ 里的每个部分读完,并在 notes/ 里各写一段摘要。

## 验收标准
- notes/partNN.md 对每个 data/partNN.txt 都存在

## 边界
不改 data/ 里的文件。

## 未知与假设
摘要几句话就够(假设)。
"""
GOAL = """## 目标
data/ 的每个部分都在 notes/ 里有摘要

## 判定清单
- 每个 data/partNN.txt 都有对应的 notes/partNN.md
"""
HANDOFF_DOC = """## 现在在做什么
在逐个读 data/ 里的部分并写摘要,正在做 part{n:02d}。

## 已经定下的
- 每部分一个 notes/partNN.md:判定者按文件核对。

## 走不通的路
(暂无)

## 下一步
读 data/part{n:02d}.txt,写 notes/part{n:02d}.md。

## 现场
- data/, notes/
"""
REASON_TAG = "依据-R{n:02d}"
try:
    from flower_magic.core.handoff import SQUEEZE_PROMPT
except ImportError:  # a version from before issue 13 (the bench measures it too): it never squeezes
    SQUEEZE_PROMPT = "\0" * 24
CLI = "import sys; from flower_magic.cli import main; sys.exit(main(sys.argv[1:]))"
RUN_TIMEOUT_S = 1800
NOT_FULL = ("[这一步在运行中被打断了", "[这个工具调用没有结果", "doesn't want to proceed")


@dataclass
class Seen:
    """One request the fake API answered."""

    wake: int
    role: str
    context_bytes: int
    session: str
    squeeze: bool
    said: str  # the newest user message's text
    tokens: int = 0  # the request's input tokens as the fake API reports them


@dataclass
class Script:
    """The scripted model: which part the run is on, and what each role answers."""

    parts: int
    count_tools: bool = False
    wake: int = 0
    judge_sessions: list[str] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def part(self) -> int:
        """The part being worked on: one more than the rounds judged so far."""
        return min(self.parts, len(self.judge_sessions) + 1)

    def answer(self, request: Request) -> Reply:
        with self.lock:
            role = role_of(request)
            sid = request.headers.get("x-claude-code-session-id", "")
            if role == "judge" and sid not in self.judge_sessions:
                self.judge_sessions.append(sid)
            body = {"system": request.body.get("system"), "messages": request.messages}
            size = len(json.dumps(body, ensure_ascii=False).encode("utf-8"))
            squeeze = SQUEEZE_PROMPT[:24] in request.last_user_text
            raw = json.dumps(request.messages, ensure_ascii=False) + json.dumps(request.body.get("system", ""))
            if self.count_tools:
                # The real API counts the tool schemas as input too; the fake leaves them out.
                raw += json.dumps(request.body.get("tools", []), ensure_ascii=False)
            tokens = max(1, len(raw) // CHARS_PER_TOKEN)
            self.seen.append(Seen(self.wake, role, size, sid, squeeze, request.last_user_text, tokens))
            reply = self._reply(role, request)
            if self.count_tools:
                reply.usage = {**reply.usage, "input_tokens": tokens}
            return reply

    def _reply(self, role: str, request: Request) -> Reply:
        if role == "clarifier":
            return text(BRIEF)
        if role == "goal":
            return text(GOAL)
        if role == "handoff":
            return text(HANDOFF_DOC.format(n=self.part))
        if role == "judge":
            n = len(self.judge_sessions)
            if n >= self.parts:
                return text("## 结论\n达成\n\n## 理由\n每部分都有摘要。\n\n## 未通过\n(无)\n")
            return text(
                f"## 结论\n未达成\n\n## 理由\npart{n:02d} 有摘要了;还差 part{n + 1:02d}({REASON_TAG.format(n=n)})。\n\n"
                f"## 未通过\n- data/part{n + 1:02d}.txt 还没有 notes/part{n + 1:02d}.md\n"
            )
        return self._work(request)

    def _work(self, request: Request) -> Reply:
        """Read the part, look at its size, write the note, report: whatever this session has not done."""
        n = self.part
        name = f"part{n:02d}"
        done = _done_calls(request)
        if not any(tool == "Read" and name in arg for tool, arg in done):
            return tool_use("Read", {"file_path": f"data/{name}.txt"})
        if not any(tool == "Bash" and name in arg for tool, arg in done):
            return tool_use("Bash", {"command": f"wc -c data/{name}.txt"})
        if not any(tool == "Write" and name in arg for tool, arg in done):
            note = f"# {name}\n\n第 {n} 部分:{n * 37 % 100} 个条目,格式一致,没有缺行。\n"
            return tool_use("Write", {"file_path": f"notes/{name}.md", "content": note})
        return text(f"第 {n} 部分读完了,摘要在 notes/{name}.md。")


def _done_calls(request: Request) -> list[tuple[str, str]]:
    """(tool, its input as JSON) for every call in the request that got a real result."""
    calls: dict[str, tuple[str, str]] = {}
    done: list[tuple[str, str]] = []
    for msg in request.messages:
        content = msg.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                calls[str(block.get("id"))] = (str(block.get("name")), json.dumps(block.get("input")))
            elif block.get("type") == "tool_result" and str(block.get("tool_use_id")) in calls:
                result = json.dumps(block.get("content"), ensure_ascii=False)
                if not block.get("is_error") and not any(marker in result for marker in NOT_FULL):
                    done.append(calls[str(block.get("tool_use_id"))])
    return done


def _write_parts(data: Path, parts: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    data.mkdir(parents=True)
    sizes = []
    for n in range(1, parts + 1):
        size = rng.randint(20_000, 40_000)
        lines: list[str] = []
        total = 0
        while total < size:
            line = f"PART-{n:02d} 记录 {len(lines):04d}: " + " ".join(
                rng.choice(("alpha", "beta", "gamma", "delta", "状态正常", "延迟", "12ms", "ok")) for _ in range(12)
            )
            lines.append(line)
            total += len(line.encode("utf-8")) + 1
        (data / f"part{n:02d}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        sizes.append(total)
    return sizes


@dataclass
class Outcome:
    window: int
    trim: bool
    per_wake: list[list[int]]
    handoffs: list[str]
    squeezes: int
    sessions: int
    judged: list[str]
    judged_rounds: list[str]
    stops: list[str]
    said: list[str]  # what flower printed on stderr, besides "stopped at step ..."
    carried: list[bool]
    notices: list[int]
    seconds: float
    tools_kb: float

    @property
    def requests(self) -> list[int]:
        return [b for wake in self.per_wake for b in wake]

    @property
    def rounds(self) -> int:
        return sum(int(j.split("/")[0]) for j in self.judged)

    @property
    def total(self) -> int:
        return sum(self.requests)

    @property
    def final(self) -> int:
        return self.requests[-1] if self.requests else 0


def run(window: int, trim: bool, args: argparse.Namespace, root: Path) -> Outcome:
    ws = root / f"w{window}-{'trim' if trim else 'notrim'}"
    ws.mkdir(parents=True)
    parts = args.wakes * args.rounds
    _write_parts(ws / "data", parts, args.seed)
    (ws / "notes").mkdir()
    script = Script(parts=parts, count_tools=args.count_tools)
    api = FakeAnthropic(default=script.answer).start()
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")}
    env.update(api.env(ws.parent / f"home-{ws.name}"))
    env.pop("ANTHROPIC_MODEL", None)
    env.pop("FLOWER_WINDOW", None)
    env["XDG_CONFIG_HOME"] = str(ws.parent / f"xdg-{ws.name}")  # no calibration from other runs
    flags = ["--rounds", str(args.rounds), "--timeout", "0", "--window", str(window)] + ([] if trim else ["--no-trim"])
    started = time.monotonic()
    said: list[str] = []
    notices: list[int] = []
    try:
        for wake in range(1, args.wakes + 1):
            script.wake = wake
            argv = [sys.executable, "-c", CLI, *flags, *([TASK] if wake == 1 else [])]
            done = subprocess.run(
                argv, cwd=ws, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
            )
            if "Traceback" in done.stderr:
                raise RuntimeError(f"wake {wake} crashed:\n{done.stderr[-3000:]}")
            notices.append(done.stdout.count("接近交接线") + done.stdout.count("--timeout 0"))
            # A wake whose rounds ran out says only "在步骤 '干活' 中止"; anything else is why a step stopped.
            said += [
                f"wake {wake}: {ln[:160]}" for ln in done.stderr.splitlines() if ln.strip() and "在步骤 " not in ln
            ]
        tools_kb = len(json.dumps(api.requests[-1].body.get("tools", []), ensure_ascii=False).encode()) / 1000
    finally:
        api.stop()
    rows = manifest.read_rows(ws / "runs")
    runs: list[str] = []
    for row in rows:
        if row["run"] not in runs:
            runs.append(row["run"])
    handoffs, judged, judged_rounds, stops = [], [], [], []
    # What a fresh worker session started with, as the API counted it: the first request of each session.
    floors: dict[int, list[int]] = {}
    firsts: set[str] = set()
    for s in script.seen:
        if s.role == "worker" and s.session not in firsts:
            firsts.add(s.session)
            floors.setdefault(s.wake, []).append(s.tokens)
    largest_part = max(len(p.read_text(encoding="utf-8")) for p in (ws / "data").iterdir())
    for wake, run_id in enumerate(runs, start=1):
        mine = [r for r in rows if r["run"] == run_id]
        worked = [r for r in mine if re.fullmatch(r"干活(#round\d+)?", r["step"])]
        verdicts = {r["step"] for r in mine if r["step"].startswith("干活·判定#")}
        judged.append(f"{len(verdicts)}/{len(worked)}")
        marks = ""
        for r in worked:
            round_n = int(r["step"].split("#round")[1]) if "#round" in r["step"] else 1
            handoffs += [f"{wake}.{round_n}"] * len(r.get("retired") or [])
            marks += "+" if f"干活·判定#{round_n}" in verdicts else "-"
            stop = ContextStop.parse(r.get("error"))
            if stop is not None:
                stops.append(f"wake {wake} round {round_n}: {_check(stop, floors.get(wake, []), largest_part)}")
        judged_rounds.append(marks)
    per_wake = [
        [s.context_bytes for s in script.seen if s.wake == w and s.role == "worker"] for w in range(1, args.wakes + 1)
    ]
    sessions = len({s.session for s in script.seen if s.role in ("worker", "handoff")})
    carried = []
    for wake in range(2, args.wakes + 1):
        first = next((s for s in script.seen if s.wake == wake and s.role == "worker"), None)
        judged_before = len({s.session for s in script.seen if s.wake < wake and s.role == "judge"})
        carried.append(first is not None and REASON_TAG.format(n=judged_before) in first.said)
    return Outcome(
        window=window,
        trim=trim,
        per_wake=per_wake,
        handoffs=handoffs,
        squeezes=sum(1 for s in script.seen if s.squeeze),
        sessions=sessions,
        judged=judged,
        judged_rounds=judged_rounds,
        stops=stops,
        said=said,
        carried=carried,
        notices=notices,
        seconds=time.monotonic() - started,
        tools_kb=tools_kb,
    )


def _check(stop: ContextStop, floors: list[int], largest_part_chars: int) -> str:
    """The stop, and whether its cause is the real one, judged from what the fake API saw: a fresh worker
    session that starts above the line is the window's fault; one that starts below it and crosses with
    one read is the result's (the part counted as the fake API counts it)."""
    fresh = min(floors) if floors else 0
    if stop.cause == WINDOW_TOO_SMALL:
        right = fresh >= stop.line
    else:
        right = fresh < stop.line <= fresh + largest_part_chars // CHARS_PER_TOKEN and stop.tool == "Read"
    return (
        f"{stop.cause} (tool {stop.tool or '-'}, result {stop.result}, start-up {stop.floor}, line {stop.line}; "
        f"the API saw a fresh session start at {fresh}) - cause {'right' if right else 'WRONG'}"
    )


def _kb(n: float) -> str:
    return f"{n / 1000:.0f}"


def show(o: Outcome) -> None:
    print(f"\n== window {o.window:,}, trimming {'on' if o.trim else 'off'}  ({o.seconds:.0f} s)")
    for wake, sizes in enumerate(o.per_wake, start=1):
        print(f"  wake {wake}: {len(sizes):2d} worker requests, KB each: {' '.join(_kb(b) for b in sizes)}")
    print(f"  total over {len(o.requests)} worker requests: {o.total / 1e6:.2f} MB; final request {_kb(o.final)} KB")
    where = ", ".join(o.handoffs) if o.handoffs else "none"
    print(
        f"  hand-offs: {len(o.handoffs)} (wake.round: {where}); squeezes: {o.squeezes}; worker sessions: {o.sessions}"
    )
    print(f"  judge ran (verdicts/rounds) per wake: {' '.join(o.judged)}; per round: {' '.join(o.judged_rounds)}")
    per_round: dict[str, int] = {}
    for where in o.handoffs:
        per_round[where] = per_round.get(where, 0) + 1
    print(f"  most hand-offs in one round: {max(per_round.values(), default=0)}")
    print(f"  each wake opened with the last verdict: {' '.join('yes' if c else 'NO' for c in o.carried) or '-'}")
    print(f"  context notices and --timeout hints printed per wake: {' '.join(map(str, o.notices))}")
    for stop in o.stops:
        print(f"  stopped: {stop}")
    for line in o.said:
        print(f"  said: {line}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wakes", type=int, default=6)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--windows", default="200000,40000")
    p.add_argument("--trim", default="on,off")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument(
        "--count-tools",
        action="store_true",
        help="count the tool schemas as input tokens, as the real API does (the fake API leaves them out)",
    )
    p.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    p.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-ctx-")) if args.keep is None else args.keep
    root.mkdir(parents=True, exist_ok=True)
    outcomes: list[Outcome] = []
    try:
        for window in (int(w) for w in args.windows.split(",")):
            for trim in (t.strip() == "on" for t in args.trim.split(",")):
                outcome = run(window, trim, args, root)
                show(outcome)
                outcomes.append(outcome)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    if outcomes:
        print(f"\n(tool schemas, left out above: {outcomes[0].tools_kb:.0f} KB in every request)")
    print("\ntrimmed / untrimmed:")
    for window in sorted({o.window for o in outcomes}, reverse=True):
        on = next((o for o in outcomes if o.window == window and o.trim), None)
        off = next((o for o in outcomes if o.window == window and not o.trim), None)
        if not (on and off and off.final and off.total):
            continue
        if on.rounds != off.rounds:
            print(f"  window {window:,}: not comparable ({on.rounds} rounds judged trimmed, {off.rounds} untrimmed)")
            continue
        print(
            f"  window {window:,}: final worker request {on.final / off.final:.0%}, "
            f"all worker requests {on.total / off.total:.0%}"
        )
    if args.json:
        args.json.write_text(json.dumps([o.__dict__ for o in outcomes], indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
