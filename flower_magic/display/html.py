"""Pure render functions: phrase lines (``(style, text)`` segments) to escaped HTML and plain text.

Guarantees:
    - Every piece of data goes through ``esc`` (``core.printable.printable``, then ``html.escape``
      with quotes) before it becomes HTML; styles become class names only from the fixed ``STYLES``
      set. The plain text (``line_text``, ``lines_text``, ``table_text``) is made printable too: a
      text/plain output may be shown by a terminal (jupyter console, nbconvert's output, a log).
      No function here accepts ready-made HTML from a caller except ``wrap`` and ``section_html``,
      whose HTML comes from here.
    - One ``<style>`` block (``STYLE``), every rule scoped under ``.flower-magic``; colours are
      JupyterLab's ``--jp-*`` variables, with fallbacks that read on light and dark backgrounds
      (the text colour itself is inherited, so a frontend without those variables keeps its own).
    - Without the style block (a sanitiser that strips it), the HTML still reads: one ``<div>`` per
      line, and the ASCII marks (``+ x - ~ !``) carry the meaning that colour adds.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from flower_magic.core.printable import printable
from flower_magic.core.words import cols
from flower_magic.front.phrases import Line

ROOT_CLASS = "flower-magic"
# Not typeset as LaTeX: JupyterLab (MathJax 3) and nbconvert / nbviewer (MathJax 2) read two "$" in
# one text as math, so "这次唤醒 $0.1241 · 清单合计 $0.2480" (or an agent's "$5 and $10") lost its dollars.
NO_MATH_CLASSES = "mathjax_ignore tex2jax_ignore"
STYLES = frozenset({"dim", "bold", "head", "ok", "bad", "warn", "note"})
STYLE = (
    "<style>"
    # Colours are JupyterLab's theme variables. Coloured text uses the theme's darkest shade on a light
    # background and a light one on a dark background, so it keeps 4.5:1 (WCAG AA) in both; orange is
    # never text (no shade of it reads on white), it marks borders only. Marks and words carry the
    # meaning; colour repeats it.
    ".flower-magic{--fm-ok:var(--jp-success-color0,#1b5e20);--fm-bad:var(--jp-error-color0,#b71c1c);"
    "--fm-note:var(--jp-info-color0,#006064);--fm-warn:var(--jp-warn-color1,#f57c00);"
    "--fm-accent:var(--jp-brand-color1,#1976d2);--fm-line:var(--jp-border-color2,rgba(128,128,128,.35));"
    "--fm-track:var(--jp-layout-color3,rgba(128,128,128,.25));"
    "font-family:var(--jp-code-font-family,Menlo,Consolas,'DejaVu Sans Mono',monospace);"
    "font-size:var(--jp-code-font-size,13px);line-height:1.5;text-align:left;margin:0;padding:0}"
    "[data-jp-theme-light='false'] .flower-magic{--fm-ok:var(--jp-success-color2);--fm-bad:var(--jp-error-color2);"
    "--fm-note:var(--jp-info-color2);--fm-accent:var(--jp-brand-color2)}"
    ".flower-magic .fm-line{white-space:pre-wrap;overflow-wrap:anywhere;min-height:1.5em;margin:0;padding:0}"
    ".flower-magic .fm-sub{padding-left:4ch}"
    ".flower-magic .fm-dim{opacity:.68}"
    ".flower-magic .fm-bold{font-weight:bold}"
    ".flower-magic .fm-head{font-weight:bold;color:var(--fm-note)}"
    ".flower-magic .fm-note{color:var(--fm-note)}"
    ".flower-magic .fm-ok{color:var(--fm-ok)}"
    ".flower-magic .fm-bad{color:var(--fm-bad)}"
    ".flower-magic .fm-warn{font-weight:bold;border-left:3px solid var(--fm-warn);padding-left:.5ch}"
    ".flower-magic .fm-step{display:flex;align-items:center;gap:1ch;margin:.6em 0 .3em;white-space:pre}"
    ".flower-magic .fm-rule{flex:1 1 4ch;min-width:4ch;border-top:2px solid var(--fm-line)}"
    ".flower-magic .fm-step .fm-dim{flex:0 1 auto;white-space:pre-wrap}"
    ".flower-magic .fm-step>.fm-head{font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:1.08em}"
    ".flower-magic details{margin:0;padding:0}"
    ".flower-magic summary{cursor:pointer;white-space:pre-wrap;overflow-wrap:anywhere;list-style:none}"
    ".flower-magic summary::-webkit-details-marker{display:none}"
    ".flower-magic summary::before{content:'▸ ';opacity:.68}"
    ".flower-magic details.fm-sec>summary{display:flex;align-items:center}"
    ".flower-magic details.fm-sec>summary>.fm-step{flex:1 1 auto;margin:.3em 0}"
    ".flower-magic details[open]>summary::before{content:'▾ '}"
    ".flower-magic summary:hover{text-decoration:underline dotted}"
    ".flower-magic .fm-pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:.2em 0 .4em 2ch;padding:.3em .6em;"
    "max-height:24em;overflow:auto;font:inherit;border-left:2px solid var(--fm-line);"
    "background:var(--jp-cell-editor-background,rgba(128,128,128,.10))}"
    ".flower-magic .fm-box{border-top:1px solid var(--fm-line);margin-top:.4em;padding-top:.3em}"
    ".flower-magic .fm-block{margin:.2em 0}"
    ".flower-magic .fm-label{display:inline-block;min-width:6em;font-weight:bold}"
    ".flower-magic .fm-scroll{overflow-x:auto;max-width:100%}"
    ".flower-magic table.fm-table{border-collapse:collapse;margin:.3em 0;font:inherit;color:inherit}"
    ".flower-magic .fm-table th,.flower-magic .fm-table td{padding:.1em .8em .1em 0;text-align:left;"
    "vertical-align:top;border:none;background:none;white-space:nowrap;color:inherit}"
    ".flower-magic .fm-table th{font-weight:bold;border-bottom:1px solid var(--fm-line)}"
    ".flower-magic .fm-table .fm-num{text-align:right}"
    ".flower-magic .fm-table td.fm-wrap{white-space:pre-wrap;overflow-wrap:anywhere;max-width:28em}"
    # the header: one wrapping row of facts; the context bar fills as the session grows
    ".flower-magic .fm-header{display:flex;flex-wrap:wrap;align-items:center;gap:.4em 1.2em;margin:.3em 0;"
    "padding:.45em .7em;border:1px solid var(--fm-line);border-radius:4px;"
    "font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:var(--jp-ui-font-size1,13px)}"
    ".flower-magic .fm-hitem{display:inline-flex;align-items:center;gap:.5em;white-space:nowrap}"
    ".flower-magic .fm-hstep{font-weight:bold}"
    ".flower-magic .fm-chip{font-weight:bold;padding:.05em .6em;border:2px solid var(--fm-accent);border-radius:1em}"
    ".flower-magic .fm-st-asking{border-color:var(--fm-warn)}"
    ".flower-magic .fm-st-done{border-color:var(--fm-ok)}"
    ".flower-magic .fm-st-failed{border-color:var(--fm-bad)}"
    ".flower-magic .fm-st-stopped{border-color:var(--fm-warn)}"
    ".flower-magic .fm-steps{display:inline-flex;gap:3px}"
    ".flower-magic .fm-seg{display:inline-block;width:1.6em;height:.5em;border-radius:2px;background:var(--fm-track)}"
    ".flower-magic .fm-seg-done{background:var(--fm-ok)}"
    ".flower-magic .fm-seg-run{background:var(--fm-accent)}"
    ".flower-magic .fm-bar{display:inline-block;width:8em;height:.55em;border-radius:3px;overflow:hidden;"
    "background:var(--fm-track)}"
    ".flower-magic .fm-fill{display:block;height:100%;min-width:2px;background:var(--fm-accent)}"
    ".flower-magic .fm-fill-warn{background:var(--fm-warn)}"
    # a narrow notebook (~380 px): the bar shrinks, then the words go under it and wrap, never cut
    ".flower-magic .fm-ctx{flex-wrap:wrap;min-width:0;max-width:100%}"
    ".flower-magic .fm-ctx .fm-bar{flex:0 1 8em;min-width:3em}"
    ".flower-magic .fm-ctx-words{white-space:normal;overflow-wrap:anywhere;min-width:0}"
    # the goal checklist: a badge (mark and word, coloured border) before each check
    ".flower-magic .fm-goals{margin:.3em 0 .5em;font-family:var(--jp-ui-font-family,system-ui,sans-serif);"
    "font-size:var(--jp-ui-font-size1,13px)}"
    ".flower-magic ul.fm-checks{list-style:none;margin:.2em 0;padding:0}"
    ".flower-magic li.fm-check{display:flex;align-items:baseline;gap:.7em;margin:.15em 0;padding:0}"
    ".flower-magic .fm-badge{flex:0 0 auto;min-width:7.5em;text-align:center;white-space:nowrap;padding:0 .5em;"
    "border:1.5px solid var(--fm-line);border-radius:3px;font-size:.92em}"
    ".flower-magic .fm-badge-pass{border-color:var(--fm-ok)}"
    ".flower-magic .fm-badge-fail{border-color:var(--fm-bad)}"
    ".flower-magic .fm-badge-unverifiable{border-color:var(--fm-warn);border-style:dashed}"
    ".flower-magic .fm-badge-pending{border-style:dotted}"
    ".flower-magic .fm-check-text{overflow-wrap:anywhere}"
    # the live widgets: a section per step, the question
    ".flower-magic .fm-section{margin:.15em 0}"
    ".flower-magic .jupyter-widget-Accordion .jupyter-widget-Collapse-header{"
    "background:var(--jp-layout-color1,transparent);color:var(--jp-ui-font-color1,inherit);font-family:var(--jp-ui-font-family,system-ui,sans-serif);"
    "font-size:var(--jp-ui-font-size1,13px);font-weight:600;padding:.35em .7em;border-color:var(--fm-line)}"
    ".flower-magic .jupyter-widget-Accordion .jupyter-widget-Collapse-header:hover{"
    "background:var(--jp-layout-color2,transparent)}"
    ".flower-magic .jupyter-widget-Accordion .jupyter-widget-Collapse-contents{padding:.3em .8em .5em;"
    "background:var(--jp-layout-color1,transparent);color:var(--jp-content-font-color1,inherit);"
    "border-color:var(--fm-line)}"
    ".flower-magic .fm-ask{margin:.4em 0;padding:.5em .7em;border:1px solid var(--fm-line);"
    "border-left:4px solid var(--fm-warn);border-radius:3px}"
    ".flower-magic .fm-ask-q{font-weight:bold;white-space:pre-wrap;overflow-wrap:anywhere}"
    ".flower-magic .fm-ask-row{gap:6px;margin-top:.4em}"
    ".flower-magic .fm-ask .widget-button{width:auto;max-width:100%}"
    # A live view whose kernel went (the frontend marks its widgets disconnected, and ignores what the
    # going kernel said last): one pill and line of ours say so instead of ipywidgets' icon on every
    # part; the question card's buttons reach nobody, so they look it and take no click, and the card
    # says what to do instead.
    ".flower-magic.jupyter-widgets-disconnected::before,.flower-magic .jupyter-widgets-disconnected::before"
    "{content:none}"
    ".flower-magic .fm-gone{display:none}"
    ".flower-magic .jupyter-widgets-disconnected .fm-header .fm-chip{display:none}"
    ".flower-magic .jupyter-widgets-disconnected .fm-header .fm-gone{display:inline-flex}"
    ".flower-magic .fm-ask-gone{display:none}"
    ".flower-magic .fm-ask.jupyter-widgets-disconnected .fm-ask-gone{display:block}"
    ".flower-magic .fm-ask.jupyter-widgets-disconnected .fm-ask-row{pointer-events:none;opacity:.4}"
    ".flower-magic .fm-ask .widget-text{flex:1 1 20em;width:auto}"
    # the agent's words as a document (display.markdown), in the content font of a Markdown cell;
    # these rules outrank JupyterLab's own .jp-RenderedHTMLCommon ones, which the block also carries
    ".flower-magic .fm-md{font-family:var(--jp-content-font-family,system-ui,-apple-system,'Segoe UI',sans-serif);"
    "font-size:var(--jp-content-font-size1,14px);line-height:1.6;margin:.35em 0;padding:0;overflow-wrap:anywhere;"
    "color:inherit}"
    ".flower-magic .fm-md>:first-child{margin-top:0}"
    ".flower-magic .fm-md>:last-child{margin-bottom:0}"
    ".flower-magic .fm-md p{margin:.3em 0;text-align:left}"
    ".flower-magic .fm-md :is(h1,h2,h3,h4,h5,h6){font-weight:600;line-height:1.3;margin:.7em 0 .2em;padding:0;"
    "border:none;color:inherit}"
    ".flower-magic .fm-md h1{font-size:1.15em}"
    ".flower-magic .fm-md h2{font-size:1.06em}"
    ".flower-magic .fm-md h3{font-size:1em}"
    ".flower-magic .fm-md :is(h4,h5,h6){font-size:1em}"
    ".flower-magic .fm-md :is(ul,ol){margin:.3em 0;padding-left:1.6em}"
    ".flower-magic .fm-md li{margin:.1em 0}"
    ".flower-magic .fm-md code{font-family:var(--jp-code-font-family,Menlo,Consolas,monospace);font-size:.9em;"
    "padding:.05em .3em;border-radius:3px;background:var(--jp-layout-color2,rgba(128,128,128,.15));color:inherit}"
    ".flower-magic .fm-md pre{margin:.4em 0;padding:.5em .7em;border-radius:4px;overflow-x:auto;"
    "background:var(--jp-cell-editor-background,rgba(128,128,128,.10));color:inherit}"
    ".flower-magic .fm-md pre code{padding:0;background:none}"
    ".flower-magic .fm-md blockquote{margin:.4em 0;padding:0 .8em;border-left:3px solid var(--fm-line);"
    "background:none;color:inherit}"
    ".flower-magic .fm-md table{border-collapse:collapse;margin:.4em 0;font-size:.95em;table-layout:auto}"
    ".flower-magic .fm-md :is(th,td){border:1px solid var(--fm-line);padding:.2em .6em;text-align:left}"
    ".flower-magic .fm-md a{color:var(--jp-content-link-color,#1565c0)}"
    # a tool call: one line, its name as a tag, opening to its input and result
    ".flower-magic .fm-tool{margin:.15em 0}"
    ".flower-magic .fm-tool>summary,.flower-magic div.fm-tool{display:block;white-space:nowrap;overflow:hidden;"
    "text-overflow:ellipsis}"
    ".flower-magic .fm-tool-name{font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:.85em;"
    "font-weight:600;padding:0 .45em;margin-right:.3em;border:1px solid var(--fm-line);border-radius:3px}"
    ".flower-magic .fm-tool-arg{opacity:.75}"
    # a round inside a step, and a judge's round: the ruling, its reason, the checks it failed
    ".flower-magic .fm-round{display:flex;align-items:center;gap:1ch;margin:.7em 0 .3em;font-weight:600;"
    "font-family:var(--jp-ui-font-family,system-ui,sans-serif)}"
    ".flower-magic .fm-verdict{margin:.6em 0;padding:.45em .8em .5em;border:1px solid var(--fm-line);"
    "border-left:4px solid var(--fm-accent);border-radius:4px}"
    ".flower-magic .fm-verdict[data-state=achieved]{border-left-color:var(--fm-ok)}"
    ".flower-magic .fm-verdict:is([data-state=not_yet],[data-state=unreachable]){border-left-color:var(--fm-bad)}"
    ".flower-magic .fm-verdict[data-state=unclear]{border-left-color:var(--fm-warn)}"
    ".flower-magic .fm-verdict-head{display:flex;flex-wrap:wrap;align-items:center;gap:.3em .9em;"
    "font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:var(--jp-ui-font-size1,13px)}"
    ".flower-magic .fm-verdict-name{font-weight:600}"
    ".flower-magic .fm-verdict .fm-md{margin:.4em 0 .2em}"
    ".flower-magic .fm-verdict ul.fm-checks{font-family:var(--jp-ui-font-family,system-ui,sans-serif);"
    "font-size:var(--jp-ui-font-size1,13px)}"
    ".flower-magic .fm-said{margin-top:.3em}"
    ".flower-magic .fm-said>summary{opacity:.68;font-family:var(--jp-ui-font-family,system-ui,sans-serif);"
    "font-size:var(--jp-ui-font-size1,13px)}"
    "</style>"
)

Cell = tuple[str, str]  # (style, text) in a table


def esc(text: object) -> str:
    """Data made safe for HTML text and attribute values (and printable: no raw ESC in a page)."""
    return html.escape(printable(str(text)), quote=True)


def spans(line: Line) -> str:
    """The segments of one line as escaped text in ``fm-<style>`` spans."""
    out = []
    for style, text in line:
        if not text:
            continue
        body = esc(text)
        out.append(f'<span class="fm-{style}">{body}</span>' if style in STYLES else body)
    return "".join(out)


def line_html(line: Line, *, sub: bool = False) -> str:
    """One line as a ``<div>``; ``sub`` indents it (subagent output)."""
    cls = "fm-line fm-sub" if sub else "fm-line"
    return f'<div class="{cls}">{spans(line)}</div>'


def lines_html(lines: Sequence[Line], *, sub: bool = False) -> str:
    return "".join(line_html(line, sub=sub) for line in lines)


def line_text(line: Line) -> str:
    return printable("".join(text for _, text in line))


def lines_text(lines: Sequence[Line]) -> str:
    return "\n".join(line_text(line) for line in lines)


def step_html(line: Line) -> str:
    """The step header (``phrases.step_header``) with its rule stretched to the output's width.

    The terminal's rule length depends on the terminal's columns; here the name and the tail are
    the same text and a line (a border, not text) fills whatever width the cell has. The terminal's
    ``==`` marks are its way to draw a heading; a page has headings, so they are left out.
    """
    head = next((text for style, text in line if style == "head"), "")
    tail = next((text for style, text in line if style == "dim"), "")
    return (
        f'<div class="fm-step"><span class="fm-head">{esc(rule_name(head))}</span>'
        f'<span class="fm-rule" aria-hidden="true"></span> '  # a space for a page without the style block
        f'<span class="fm-dim">{esc(tail)}</span></div>'
    )


def question_html(text: str, gone: str = "") -> str:
    """The agent's question (data, escaped here) as the question widget shows it; ``gone`` is shown only
    once the frontend marks the widget disconnected (its kernel went: the buttons reach nobody)."""
    hidden = f'<div class="fm-ask-gone fm-line fm-bad">{esc(gone)}</div>' if gone else ""
    return f'<div class="fm-ask-q">{esc(text)}</div>{hidden}'


def section_html(head: str, body: str, *, is_open: bool) -> str:
    """A step's section (``head`` and ``body`` built here): collapsible, ``head`` always shown."""
    return f'<details class="fm-sec"{" open" if is_open else ""}><summary>{head}</summary>{body}</details>'


def label_html(line: Line) -> str:
    """A hand-off section line (bold padded label, then the text) with the label in a fixed-width box.

    The terminal pads labels with spaces to equal display columns; in a browser a CJK glyph is
    not exactly two Latin columns wide, so the label gets a box instead.
    """
    label, rest = line[0][1].strip(), "".join(text for _, text in line[1:]).strip()
    return f'<div class="fm-line">  <span class="fm-label">{esc(label)}</span>{esc(rest)}</div>'


def round_html(line: Line) -> str:
    """A round inside a step (``phrases.round_header``, ``-- 干活#round2 ----``): its name and a rule."""
    name = rule_name("".join(text for _, text in line))
    return f'<div class="fm-round"><span>{esc(name)}</span><span class="fm-rule" aria-hidden="true"></span></div>'


def tool_html(summary: Line, tool: str, body: str, *, sub: bool = False) -> str:
    """A tool call as one compact line (the tool's name as a tag, then what it was called on) that
    opens to ``body`` (its input and result: data, escaped here).

    Args:
        summary: the call's line (``view.shown``'s ``* [Tool] what``); the tag and the rest are cut
            from it, so a page says exactly what the terminal says.
        tool: the tool's name; "" (or a line not in that shape) shows the line as it is.
    """
    said = "".join(text for _, text in summary)
    prefix = f"* [{tool}] "
    if tool and said.startswith(prefix):
        arg = said[len(prefix) :]
        shown = f'<span class="fm-tool-name">{esc(tool)}</span> <span class="fm-tool-arg">{esc(arg)}</span>'
    else:
        shown = spans(summary)
    cls = "fm-tool fm-sub" if sub else "fm-tool"
    if not body:
        return f'<div class="{cls}">{shown}</div>'
    return f'<details class="{cls}"><summary>{shown}</summary><div class="fm-pre">{esc(body)}</div></details>'


_RULE_RE = re.compile(r"(?:==|--) (.*?) [=-]{4,}")


def rule_name(text: str) -> str:
    """The name inside a terminal rule line (``== 干活 =====``, ``-- 干活·判定#1 ----``), else ``text``."""
    match = _RULE_RE.fullmatch(text.strip())
    return match.group(1) if match else text.strip()


def table_html(headers: Sequence[str], rows: Sequence[Sequence[Cell]], *, numeric: frozenset[int]) -> str:
    """A table; ``numeric`` holds the indexes of right-aligned columns, the last column wraps."""
    head = "".join(
        f'<th class="fm-num">{esc(h)}</th>' if i in numeric else f"<th>{esc(h)}</th>" for i, h in enumerate(headers)
    )
    body = []
    last = len(headers) - 1
    for row in rows:
        cells = []
        for i, (style, text) in enumerate(row):
            cls = "fm-num" if i in numeric else "fm-wrap" if i == last else ""
            inner = f'<span class="fm-{style}">{esc(text)}</span>' if style in STYLES else esc(text)
            cells.append(f'<td class="{cls}">{inner}</td>' if cls else f"<td>{inner}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    table = f'<table class="fm-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    return f'<div class="fm-scroll">{table}</div>'


def table_text(headers: Sequence[str], rows: Sequence[Sequence[Cell]], *, numeric: frozenset[int]) -> str:
    """The same table as aligned plain text (CJK counts as two columns)."""
    grid = [[printable(h) for h in headers]] + [[printable(text) for _, text in row] for row in rows]
    widths = [max(cols(r[i]) for r in grid) for i in range(len(headers))]
    out = []
    for r in grid:
        cells = []
        for i, text in enumerate(r):
            pad = " " * (widths[i] - cols(text))
            cells.append(pad + text if i in numeric else text + pad)
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def wrap(body: str, *, style: bool = True) -> str:
    """``body`` (HTML built here) inside the root element, with the style block first."""
    return f'<div class="{ROOT_CLASS} {NO_MATH_CLASSES}">{STYLE if style else ""}{body}</div>'
