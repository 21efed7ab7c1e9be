"""The agent's Markdown as the notebook shows it (``display.markdown``): a document, and never markup
of the agent's own making."""

from __future__ import annotations

import pytest

from flower_magic.display.markdown import MD_CLASS, block_html, to_html
from tests.test_display import TagAudit


def test_headings_lists_code_and_tables_render_as_a_document() -> None:
    page = to_html("## 结论\n达成\n\n- 一\n- 二\n\n`a < b`\n\n```\nx = 1\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |")
    assert "<h2>结论</h2>" in page and "<p>达成</p>" in page
    assert "<ul>\n<li>一</li>\n<li>二</li>\n</ul>" in page
    assert "<code>a &lt; b</code>" in page  # a code span shows the character, once escaped
    assert "<pre><code>x = 1\n</code></pre>" in page
    assert "<table>" in page and "<td>1</td>" in page
    assert "##" not in page


def test_a_single_newline_is_a_line_break() -> None:
    assert to_html("第一行\n第二行") == "<p>第一行<br />\n第二行</p>"


HOSTILE = [
    "<script>window.__xss=1</script>",
    '<img src=x onerror="window.__xss=2">',
    "<style>body{display:none}</style>",
    "<svg onload=alert(1)>",
    "<iframe src=https://evil.example></iframe>",
    "<div onclick=alert(1)>block</div>\n\nnext",
    "<!-- hidden --> text",
    "| a |\n|---|\n| <b onmouseover=alert(1)>x</b> |",
    "`<script>` and ```<img src=x onerror=alert(1)>```",
    "[a](javascript:alert(1))",
    "[a](JaVaScRiPt:alert(1))",
    "[a](java&#x09;script:alert(1))",
    "[a](data:text/html,<script>alert(1)</script>)",
    "[a](vbscript:msgbox)",
    "<javascript:alert(1)>",
    '[a](https://example.com "t\\" onmouseover=alert(1) x=\\"")',
    "![tracker](https://evil.example/pixel.png)",
    "&lt;script&gt;alert(1)&lt;/script&gt;",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_the_agents_html_never_becomes_markup(text: str) -> None:
    """Raw HTML, a link that runs code or an image in agent text would run or load in the person's
    page (JupyterLab renders a trusted output's Markdown unsanitised; nbconvert sanitises nothing)."""
    page = to_html(text)
    audit = TagAudit()
    audit.feed(page)
    audit.close()
    assert audit.bad == []
    for bad in ("<script", "<img", "<style", "<svg", "<iframe", "<!--", "<b "):
        assert bad not in page.lower()


def test_links_open_elsewhere_and_images_are_links() -> None:
    link = to_html("[docs](https://example.com/a)")
    assert link == (
        '<p><a target="_blank" rel="noopener noreferrer nofollow" href="https://example.com/a">docs</a></p>'
    )
    image = to_html("![chart](https://example.com/c.png)")
    assert "<img" not in image and 'href="https://example.com/c.png">chart</a>' in image
    assert 'href="#harmful-link"' in to_html("[x](javascript:alert(1))")


def test_the_block_carries_the_notebooks_markdown_class_and_text_is_made_printable() -> None:
    page = block_html("a\x1b]52;c;Y2xpcA==\x07b", sub=True)
    assert page == f'<div class="{MD_CLASS} fm-sub"><p>ab</p></div>'
    assert "jp-RenderedHTMLCommon" in MD_CLASS
    assert to_html("  \n ") == ""
