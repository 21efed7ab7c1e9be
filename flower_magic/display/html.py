"""Pure render functions: phrase lines (``(style, text)`` segments) to escaped HTML and plain text.

Guarantees:
    - Every piece of data goes through ``esc`` (``html.escape`` with quotes) before it becomes HTML;
      styles become class names only from the fixed ``STYLES`` set. No function here accepts
      ready-made HTML from a caller except ``wrap`` and ``details``, whose HTML comes from here.
    - One ``<style>`` block (``STYLE``), every rule scoped under ``.flower-magic``; colours are
      JupyterLab's ``--jp-*`` variables, with fallbacks that read on light and dark backgrounds
      (the text colour itself is inherited, so a frontend without those variables keeps its own).
    - Without the style block (a sanitiser that strips it), the HTML still reads: one ``<div>`` per
      line, and the ASCII marks (``+ x - ~ !``) carry the meaning that colour adds.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from flower_magic.core.words import cols
from flower_magic.workflow.phrases import Line

ROOT_CLASS = "flower-magic"
STYLES = frozenset({"dim", "bold", "head", "ok", "bad", "warn", "note"})
# Enough "=" to fill any output width; CSS clips the rule where the tail begins.
RULE_FILL = "=" * 240

STYLE = (
    "<style>"
    ".flower-magic{font-family:var(--jp-code-font-family,Menlo,Consolas,'DejaVu Sans Mono',monospace);"
    "font-size:var(--jp-code-font-size,13px);line-height:1.5;text-align:left;margin:0;padding:0}"
    ".flower-magic .fm-line{white-space:pre-wrap;overflow-wrap:anywhere;min-height:1.5em;margin:0;padding:0}"
    ".flower-magic .fm-sub{padding-left:4ch}"
    ".flower-magic .fm-dim{opacity:.68}"
    ".flower-magic .fm-bold{font-weight:bold}"
    ".flower-magic .fm-head{font-weight:bold;color:var(--jp-info-color0,#0e8fa3)}"
    ".flower-magic .fm-note{color:var(--jp-info-color0,#0e8fa3)}"
    ".flower-magic .fm-ok{color:var(--jp-success-color1,#2e9d4a)}"
    ".flower-magic .fm-bad{color:var(--jp-error-color1,#d9453a)}"
    ".flower-magic .fm-warn{color:var(--jp-warn-color0,#d97706)}"
    ".flower-magic .fm-step{display:flex;align-items:baseline;gap:1ch;margin:.6em 0 .3em;white-space:pre}"
    # the fill is out of flow, so its 240 "=" never widen the line (an HTML widget sizes to content)
    ".flower-magic .fm-rule{position:relative;flex:1 1 4ch;min-width:4ch;align-self:stretch;overflow:hidden;"
    "color:var(--jp-info-color0,#0e8fa3);opacity:.55}"
    ".flower-magic .fm-rule>span{position:absolute;left:0;top:0;white-space:nowrap}"
    ".flower-magic .fm-step .fm-dim{flex:0 1 auto;white-space:pre-wrap}"
    ".flower-magic details{margin:0;padding:0}"
    ".flower-magic summary{cursor:pointer;white-space:pre-wrap;overflow-wrap:anywhere;list-style:none}"
    ".flower-magic summary::-webkit-details-marker{display:none}"
    ".flower-magic summary:hover{text-decoration:underline dotted}"
    ".flower-magic .fm-pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:.2em 0 .4em 2ch;padding:.3em .6em;"
    "max-height:24em;overflow:auto;font:inherit;border-left:2px solid var(--jp-border-color2,rgba(128,128,128,.35));"
    "background:var(--jp-cell-editor-background,rgba(128,128,128,.10))}"
    ".flower-magic .fm-box{border-top:1px solid var(--jp-border-color2,rgba(128,128,128,.35));"
    "margin-top:.4em;padding-top:.3em}"
    ".flower-magic .fm-block{margin:.2em 0}"
    ".flower-magic .fm-label{display:inline-block;min-width:6em;font-weight:bold}"
    ".flower-magic .fm-scroll{overflow-x:auto;max-width:100%}"
    ".flower-magic table.fm-table{border-collapse:collapse;margin:.3em 0;font:inherit;color:inherit}"
    ".flower-magic .fm-table th,.flower-magic .fm-table td{padding:.1em .8em .1em 0;text-align:left;"
    "vertical-align:top;border:none;background:none;white-space:nowrap;color:inherit}"
    ".flower-magic .fm-table th{font-weight:bold;border-bottom:1px solid var(--jp-border-color2,rgba(128,128,128,.35))}"
    ".flower-magic .fm-table .fm-num{text-align:right}"
    ".flower-magic .fm-table td.fm-wrap{white-space:pre-wrap;overflow-wrap:anywhere;max-width:28em}"
    "</style>"
)

Cell = tuple[str, str]  # (style, text) in a table


def esc(text: object) -> str:
    """Data made safe for HTML text and attribute values."""
    return html.escape(str(text), quote=True)


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
    return "".join(text for _, text in line)


def lines_text(lines: Sequence[Line]) -> str:
    return "\n".join(line_text(line) for line in lines)


def step_html(line: Line) -> str:
    """The step header (``phrases.step_header``) with its rule stretched to the output's width.

    The terminal's rule length depends on the terminal's columns; here the name and the tail are
    the same text and the ``=`` run fills whatever width the cell has.
    """
    head = next((text for style, text in line if style == "head"), "")
    tail = next((text for style, text in line if style == "dim"), "")
    name, _, _bar = head.rpartition(" ")
    return (
        f'<div class="fm-step"><span class="fm-head">{esc(name)}</span>'
        f'<span class="fm-rule" aria-hidden="true"><span>{RULE_FILL}</span></span>'
        f'<span class="fm-dim">{esc(tail)}</span></div>'
    )


def label_html(line: Line) -> str:
    """A hand-off section line (bold padded label, then the text) with the label in a fixed-width box.

    The terminal pads labels with spaces to equal display columns; in a browser a CJK glyph is
    not exactly two Latin columns wide, so the label gets a box instead.
    """
    label, rest = line[0][1].strip(), "".join(text for _, text in line[1:]).strip()
    return f'<div class="fm-line">  <span class="fm-label">{esc(label)}</span>{esc(rest)}</div>'


def details(summary: Line, body: str, *, sub: bool = False) -> str:
    """A collapsed block: ``summary`` is the visible line, ``body`` (data, escaped here) the details."""
    cls = ' class="fm-sub"' if sub else ""
    return f'<details{cls}><summary>{spans(summary)}</summary><div class="fm-pre">{esc(body)}</div></details>'


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
    grid = [list(headers)] + [[text for _, text in row] for row in rows]
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
    return f'<div class="{ROOT_CLASS}">{STYLE if style else ""}{body}</div>'
