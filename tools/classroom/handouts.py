"""Handouts: each executed notebook as one self-contained HTML page (no kernel, no network), with a contents
page; the page template lies in handout/."""

from __future__ import annotations

import copy
import html
import re
from pathlib import Path

import nbformat

from .cells import is_check_cell, is_reveal_cell, is_widget_cell, source_of, tags_of
from .layout import exercises
from .maths import render_math

TEMPLATES = Path(__file__).resolve().parent  # nbconvert finds the "handout" template here
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
LINK = re.compile(r"\]\(((?:\.\./notebooks/|\./)?)(\d\d_[\w-]+)\.ipynb(#[^)\s]*)?\)")
HANDOUT_CSS = """
<style>
.al-widget-note, .al-expected-error {border-left: 4px solid #1f77b4; background: #eef5fb; padding: 6px 10px;
  margin: 4px 0; font-family: var(--jp-ui-font-family, sans-serif); font-size: 14px}
.al-expected-error {border-color: #a05a00; background: #fff4e5}
.al-expected-error pre {margin: 4px 0 0 0; white-space: pre-wrap}
.al-hidden-source > summary {cursor: pointer; color: #1f77b4; padding: 4px 0 4px 8px;
  font-family: var(--jp-ui-font-family, sans-serif); font-size: 14px}
.al-handout-nav {font-family: var(--jp-ui-font-family, sans-serif); margin: 8px 0 16px 0}
</style>
"""
INDEX_PAGE = (
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Autograd Lab: handouts</title>"
    "<style>body{font-family:sans-serif;max-width:46em;margin:2em auto;line-height:1.5}</style></head><body>\n"
    "<h1>Autograd Lab: handouts</h1>\n<p>Every notebook of the course as it looks after running, one page each. "
    "The pages need no kernel; to change code and move the widgets, open the notebooks in JupyterLab "
    "(see the course's README).</p>\n<ol start=\"0\">\n{rows}\n</ol>\n</body></html>\n"
)


def link_to_html(text: str) -> str:
    """Markdown links to another course notebook, pointed at its handout page."""
    return LINK.sub(lambda m: f"]({m.group(2)}.html{m.group(3) or ''})", text)


def _format_set(values: dict) -> str:
    return ", ".join(f"{k} = {v!r}" if isinstance(v, str) else f"{k} = {v}" for k, v in values.items())


def handout_notebook(nb, root: Path):
    """The notebook as a handout shows it: check cells left out, worked solutions folded in from their files,
    widgets through their fixed-input calls, expected errors labelled, links to the other notebooks pointing
    at their pages, maths drawn as SVG.

    Returns (notebook, whether some formula still needs MathJax)."""
    nb = copy.deepcopy(nb)
    needs_mathjax = False
    solutions = {ex.solution_id: ex for ex in exercises(nb, root)}
    nb.cells = [c for c in nb.cells if not is_check_cell(c)]  # CI's checks: no output, nothing to read
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            text, left = render_math(link_to_html(source_of(cell)))
            cell.source, needs_mathjax = text, needs_mathjax or left
        elif is_reveal_cell(cell):
            ex = solutions[nb.cells[i - 1].get("id")]
            cell.source = ex.solution_file.read_text().rstrip()
            cell.metadata["al_handout"] = "solution"  # the page folds it under "Worked solution"
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
            cell.outputs = []
        elif cell.cell_type == "code":
            cell.outputs = _handout_outputs(cell)
    return nb, needs_mathjax


def _handout_outputs(cell) -> list:
    if is_widget_cell(cell):
        meta = cell.metadata["autograd_lab"]
        note = (
            '<div class="al-widget-note"><b>Live widget.</b> In a running notebook these controls redraw the output. '
            f"Here, without a kernel, the next code cell shows what the widget shows at "
            f"<code>{html.escape(_format_set(meta.get('set', {})))}</code>.</div>"
        )
        return [nbformat.v4.new_output("display_data", data={"text/html": note})]
    outputs = []
    for out in cell.get("outputs", []):
        msg = _error_on_purpose(cell, out)
        if msg is not None:
            block = (
                '<div class="al-expected-error"><b>This cell raises an error on purpose</b> '
                f"(the text explains why):<pre>{html.escape(msg)}</pre></div>"
            )
            outputs.append(nbformat.v4.new_output("display_data", data={"text/html": block}))
        elif out.output_type in ("display_data", "execute_result") and WIDGET_MIME in out.get("data", {}):
            continue
        else:
            outputs.append(out)
    return outputs


def _error_on_purpose(cell, out) -> str | None:
    """``Kind: message`` of an error a cell shows on purpose: raised in a cell tagged ``raises-exception``, or
    printed by ``with lab.shows_error():`` (its traceback on the error stream); None for any other output."""
    if out.output_type == "error" and "raises-exception" in tags_of(cell):
        return f"{out.ename}: {out.evalue}"
    text = out.get("text", "") if out.output_type == "stream" and out.get("name") == "stderr" else ""
    if "shows_error" in cell.source and text.startswith(SHOWN_ERROR):
        return next(line for line in reversed(text.splitlines()) if line.strip())
    return None


SHOWN_ERROR = "Traceback (most recent call last):"  # how autograd_lab.errors.shows_error begins what it prints


def notebook_title(nb, fallback: str) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in source_of(cell).splitlines():
                m = re.match(r"^#\s+(.*)", line)
                if m:
                    return re.sub(r"[`*_]", "", m.group(1)).strip()
    return fallback


def _exporter():
    """The page maker: one for all the pages (it compiles its templates once)."""
    from nbconvert import HTMLExporter

    return HTMLExporter(
        template_name="handout", extra_template_basedirs=[str(TEMPLATES)], theme="light", embed_images=True
    )


def render_handout(path: Path, nav: str, exporter) -> str:
    """One notebook's page, made by ``exporter`` (``_exporter()``)."""
    nb, needs_mathjax = handout_notebook(nbformat.read(path, as_version=4), path.parent)
    resources = {"metadata": {"name": notebook_title(nb, path.stem)}, "needs_mathjax": needs_mathjax}
    body, _ = exporter.from_notebook_node(nb, resources=resources)
    body = body.replace("</head>", HANDOUT_CSS + "</head>", 1)
    body = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + nav, body, count=1)
    return body


def _nav(notebooks: list[Path], i: int) -> str:
    links = ['<a href="index.html">Contents</a>']
    if i > 0:
        links.append(f'<a href="{notebooks[i - 1].stem}.html">Previous</a>')
    if i + 1 < len(notebooks):
        links.append(f'<a href="{notebooks[i + 1].stem}.html">Next</a>')
    return f'<nav class="al-handout-nav">{" | ".join(links)}</nav>'


def handouts(notebooks: list[Path], out: Path) -> list[Path]:
    """One page per notebook and the contents page, index.html, in ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    pages, rows, exporter = [], [], _exporter()
    for i, path in enumerate(notebooks):
        title = notebook_title(nbformat.read(path, as_version=4), path.stem)
        page = out / f"{path.stem}.html"
        page.write_text(render_handout(path, _nav(notebooks, i), exporter))
        pages.append(page)
        rows.append(f'<li><a href="{page.name}">{html.escape(title)}</a></li>')
    index = out / "index.html"
    index.write_text(INDEX_PAGE.replace("{rows}", "\n".join(rows)))
    return [index, *pages]
