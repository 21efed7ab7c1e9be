"""The agent's Markdown as safe HTML: headings, lists, code, tables, links, for the notebook's view.

The notebook shows what the agent wrote as a document, not as raw ``## 结论`` lines. It is rendered
here, in Python, once, and the same HTML goes to the live widgets and to the saved output's
``text/html`` (so GitHub, nbviewer and ``nbconvert`` show it as the live view did). It is not handed
to the frontend's own Markdown renderer: JupyterLab renders a trusted output's Markdown without its
sanitizer (and evaluates its ``<script>`` tags), and nbconvert and an ipywidgets ``HTML`` widget
sanitise nothing, so raw HTML in an agent's text would run in the person's page. The block carries
JupyterLab's own class for rendered Markdown (``jp-RenderedHTMLCommon``), so it looks like a
Markdown cell in the notebook's theme.

Guarantees:
    - Raw HTML in the text is shown as the characters it is (escaped), never as markup: no tag,
      attribute, style or comment from the text reaches the page; code spans and blocks are escaped.
    - A link whose scheme can run code (``javascript:``, ``vbscript:``, ``data:`` …) goes nowhere
      (mistune's ``safe_url``); every link opens in a new tab and tells the target nothing
      (``rel="noopener noreferrer nofollow"``).
    - An image is a link to it, never an ``<img>``: opening a notebook fetches nothing the agent
      named.
    - A single newline is a line break (agent text is written as lines, as a chat shows it).
Not guaranteed:
    - Math and syntax colouring: ``$x$`` and fenced code stay as written.
"""

from __future__ import annotations

import functools
from typing import Any

from flower_magic.core.printable import printable

MD_CLASS = "fm-md jp-RenderedHTMLCommon"  # JupyterLab's class for rendered Markdown: its theme's look
LINK_ATTRS = 'target="_blank" rel="noopener noreferrer nofollow"'


@functools.cache
def _markdown() -> Any:
    """The one renderer (built on first use: the display package imports in milliseconds)."""
    import mistune

    class SafeLinks(mistune.HTMLRenderer):
        def link(self, text: str, url: str, title: str | None = None) -> str:
            return str(super().link(text, url, title)).replace("<a ", f"<a {LINK_ATTRS} ", 1)

        def image(self, text: str, url: str, title: str | None = None) -> str:
            return self.link(text or mistune.escape(url), url, title)

    return mistune.create_markdown(
        renderer=SafeLinks(escape=True), hard_wrap=True, plugins=["strikethrough", "table", "url"]
    )


def to_html(text: str) -> str:
    """``text`` (Markdown written by the agent) as HTML safe to put in the page.

    Args:
        text: the text; made printable first (no escape sequence or control character).

    Returns:
        The rendered blocks (``<p>``, ``<h2>``, ``<ul>`` …), "" for empty text.
    """
    text = printable(str(text))
    if not text.strip():
        return ""
    return str(_markdown()(text)).strip()


def block_html(text: str, *, sub: bool = False) -> str:
    """``to_html(text)`` in the view's Markdown block (``sub``: indented, a subagent's)."""
    cls = f"{MD_CLASS} fm-sub" if sub else MD_CLASS
    return f'<div class="{cls}">{to_html(text)}</div>'
