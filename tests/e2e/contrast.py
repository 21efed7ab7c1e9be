"""WCAG contrast of the text on a page, measured in the browser (issue 12: 4.5:1 for text)."""

from __future__ import annotations

from typing import Any

AA_TEXT = 4.5

# For every element under ``root`` with its own visible text: its colour against the first opaque
# background behind it (an ancestor's; translucent ones blended in), as a WCAG contrast ratio.
_MEASURE = """(root) => {
  const parse = c => {
    const m = c.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return [0, 0, 0, 0];
    const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const channel = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const lum = ([r, g, b]) => 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  const over = (top, under) => [0, 1, 2].map(i => top[i] * top[3] + under[i] * (1 - top[3])).concat([1]);
  const background = el => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    let bg = [255, 255, 255, 1];
    for (const c of layers.reverse()) bg = over(c, bg);
    return bg;
  };
  const out = [];
  for (const el of document.querySelectorAll(root + ' *')) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length || getComputedStyle(el).visibility === 'hidden') continue;
    if (el.closest(':disabled')) continue;  // WCAG exempts controls that cannot be used
    const style = getComputedStyle(el);
    const bg = background(el);
    // SVG text is painted with fill; an ancestor's opacity fades the text into what is behind it.
    const paint = parse(el instanceof SVGElement ? style.fill : style.color);
    let opacity = 1;
    for (let e = el; e; e = e.parentElement) opacity *= parseFloat(getComputedStyle(e).opacity);
    const fg = over([paint[0], paint[1], paint[2], paint[3] * opacity], bg);
    const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
    out.push({
      text: el.textContent.trim().slice(0, 40),
      cls: typeof el.className === 'string' ? el.className : '',
      ratio: (a + 0.05) / (b + 0.05),
      fg: style.color,
      bg: 'rgb(' + bg.slice(0, 3).map(Math.round).join(',') + ')'
    });
  }
  return out;
}"""


def low_contrast(page: Any, root: str, minimum: float = AA_TEXT) -> list[str]:
    """The texts under ``root`` whose contrast is below ``minimum``, described for a failure message."""
    return [
        f"{m['ratio']:.2f}:1 {m['text']!r} ({m['cls']}: {m['fg']} on {m['bg']})"
        for m in page.evaluate(_MEASURE, root)
        if m["ratio"] < minimum
    ]
