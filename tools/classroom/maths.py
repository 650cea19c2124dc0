"""The formulas of a markdown text drawn as inline SVG images by matplotlib's mathtext, so that a page shows
them without MathJax (offline); a formula mathtext cannot draw is left as it was."""

from __future__ import annotations

import html
import re

from .cells import FENCE

MATH_DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
MATH_INLINE = re.compile(r"(?<![\\$\w])\$(?=\S)([^$\n]+?)(?<=\S)\$(?![\w$])")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def math_svg(tex: str, display: bool = False) -> str | None:
    """A LaTeX formula as an inline SVG <img> drawn by matplotlib's mathtext; None when mathtext cannot."""
    import base64
    import io

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import rcParams
    from matplotlib.font_manager import FontProperties
    from matplotlib.mathtext import math_to_image

    rcParams["svg.hashsalt"] = "autograd-lab"  # the same page every time
    buf = io.BytesIO()
    try:
        size = FontProperties(size=13 if display else 11)
        one_line = " ".join(tex.split())  # mathtext reads one line; a display formula is often written on several
        depth = math_to_image(f"${one_line}$", buf, prop=size, dpi=72, format="svg")
    except Exception:  # mathtext knows a subset of LaTeX: leave the formula to MathJax
        return None
    svg = re.sub(r"<metadata>.*?</metadata>", "", buf.getvalue().decode(), flags=re.S)
    data = base64.b64encode(svg.encode()).decode()
    style = "display:block;margin:0.5em auto" if display else f"vertical-align:-{depth:.1f}pt"
    alt = html.escape(tex.strip())
    return f'<img class="al-math" alt="{alt}" style="{style}" src="data:image/svg+xml;base64,{data}">'


def render_math(markdown: str) -> tuple[str, bool]:
    """Replace the $...$ and $$...$$ formulas of a markdown text (outside code) by SVG images.

    Returns the text and whether a formula is left for MathJax."""
    left = False

    def swap(display):
        def repl(m):
            nonlocal left
            img = math_svg(m.group(1), display)
            if img is None:
                left = True
                return m.group(0)
            return img

        return repl

    def in_text(text):
        out, pos = [], 0
        for m in CODE_SPAN.finditer(text):
            out.append(MATH_INLINE.sub(swap(False), MATH_DISPLAY.sub(swap(True), text[pos : m.start()])))
            out.append(m.group(0))
            pos = m.end()
        out.append(MATH_INLINE.sub(swap(False), MATH_DISPLAY.sub(swap(True), text[pos:])))
        return "".join(out)

    blocks, fenced, chunk = [], False, []
    for line in markdown.split("\n"):
        if FENCE.match(line):
            blocks.append((fenced, "\n".join(chunk)))
            chunk, fenced = [], not fenced
            blocks.append((True, line))
            continue
        chunk.append(line)
    blocks.append((fenced, "\n".join(chunk)))
    text = "\n".join(part if code else in_text(part) for code, part in blocks if part is not None)
    return text, left
