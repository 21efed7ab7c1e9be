"""``python -m flower_magic.testing``: run the fake Anthropic API in the foreground.

Point a Claude Code CLI (or ``flower`` / ``%flower``) at it with the printed environment. Replies come
from a JSON script (a list of reply objects, see ``flower_magic.testing.replies.Reply``), then from
an echo model that answers every request with the last thing it was told.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from flower_magic.testing.replies import Reply, text
from flower_magic.testing.request import Request
from flower_magic.testing.server import FakeAnthropic


def echo(request: Request) -> Reply:
    said = request.last_user_text.strip().splitlines()
    return text(f"(fake model) you said: {said[-1][:200] if said else ''}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flower_magic.testing", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = any free port")
    parser.add_argument("--script", type=Path, help="JSON file: a list of replies, answered in order")
    parser.add_argument("--log", type=Path, help="write the request log (JSON) here on exit")
    args = parser.parse_args(argv)

    replies: list[Reply] = []
    if args.script:
        try:
            data = json.loads(args.script.read_text(encoding="utf-8"))
            replies = [Reply.from_dict(item) for item in data]
        except (OSError, ValueError, TypeError) as exc:
            parser.error(f"cannot use {args.script}: {exc}")
    api = FakeAnthropic(replies, default=echo, host=args.host, port=args.port).start()
    print(f"fake Anthropic API on {api.url} ({len(replies)} scripted replies, then echo). Use:")
    for key, value in api.env().items():
        print(f"  export {key}={value}")
    print("Ctrl-C to stop.", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        api.stop()
        if args.log:
            api.dump_log(args.log)
        print(f"\n{len(api.requests)} requests served.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
