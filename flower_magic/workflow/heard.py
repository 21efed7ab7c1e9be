"""What a person said that a resumed session never received, found in the session's own transcript.

A request cut short before its brief grows in ``诉求.md``: the task, then each thing said at a later
start after a blank line (``starter_flow``). The clarifier's session received the request as it stood
when the session began (its first prompt, sent verbatim), and each later addition in a message that
begins with ``head`` (``clarify.CLARIFY_SAID``'s opening). ``unheard`` reads which paragraphs of the
request the session holds that way (``RunStore.holds_text``) and returns the rest.

Guarantees:
    - Words the session holds are not returned again: a re-run after a kill that came after they were
      stored does not send them twice. Words it does not hold are returned, whichever process said
      them and however it ended.
    - A paragraph counts as heard only as part of the first prompt or right after ``head``: a short
      answer ("csv") that the model itself wrote in a question's options is still returned.
    - At most about ``log2(paragraphs)`` lookups per heard run of paragraphs (held text is searched
      by binary search over its length: a part of something held is held).
Not guaranteed:
    - Text a person wrote that repeats, word for word and right after ``head``, something already sent.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_BREAK = re.compile(r"\n[ \t]*\n\s*")  # the blank line starter_flow puts between additions


def paragraphs(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each paragraph of ``text``, in order (blank-line separated)."""
    spans: list[tuple[int, int]] = []
    at = 0
    for gap in _BREAK.finditer(text):
        if gap.start() > at:
            spans.append((at, gap.start()))
        at = gap.end()
    if at < len(text):
        spans.append((at, len(text)))
    return spans


def unheard(request: str, holds: Callable[[str], bool], *, head: str) -> str:
    """The paragraphs of ``request`` the session has not received, joined as they stand in it.

    Args:
        request: the request as saved (``诉求.md``).
        holds: whether the session's stored transcript contains a text (``Runtime.holds_text``).
        head: what every later message carrying a person's words begins with.
    """
    text = request.strip()
    spans = paragraphs(text)
    runs: list[list[int]] = []  # [first, last] paragraph of each stretch not received
    i = 0
    while i < len(spans):

        def held(j: int, i: int = i) -> bool:
            part = text[spans[i][0] : spans[j][1]]
            # The first prompt carried the request's opening verbatim; every later part followed ``head``.
            return holds(head + part) or (i == 0 and holds(part))

        if not held(i):
            if runs and runs[-1][1] == i - 1:
                runs[-1][1] = i
            else:
                runs.append([i, i])
            i += 1
            continue
        lo, hi = i, len(spans) - 1  # held(lo) is true: find the last j for which it is
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if held(mid):
                lo = mid
            else:
                hi = mid - 1
        i = lo + 1
    return "\n\n".join(text[spans[first][0] : spans[last][1]] for first, last in runs)
