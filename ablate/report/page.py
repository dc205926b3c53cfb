"""report/index.html: an experiment's report on one self-contained page, in the order a reader needs it.

First what the experiment asked and what its verdicts say, in words (ablate.report.summary); then the forest plot
across the page; then the comparison table with a legend of a few lines. Everything else (the notes, every seed,
the other tables and plots, the run cards) follows in collapsed sections (<details>), one a topic.

Every SVG the report drew is inlined, its ids prefixed with the plot's name so that the plots of one page
do not share ids. Nothing is fetched from elsewhere (no scripts, stylesheets or images), so the page can
be mailed or attached as one file. Torch-free, like the rest of the report.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd

from ablate.report.plots import CAPTIONS
from ablate.report.summary import Summary
from ablate.report.tables import to_html

STYLE = """
body { font-family: system-ui, sans-serif; margin: 0.6em auto; max-width: 1200px; padding: 0 1em; color: #222; }
h1 { font-size: 1.35em; margin: 0.2em 0; }
p.question { margin: 0.2em 0; color: #444; }
p.summary { margin: 0.3em 0 0.4em; font-size: 1.05em; }
p.view { margin: 0.2em 0; padding: 0.2em 0.5em; background: #fff3cd; border-left: 4px solid #d9a400; }
table.ablate { border-collapse: collapse; font-size: 0.9em; margin: 0.3em 0; }
table.ablate th, table.ablate td { border-bottom: 1px solid #ddd; padding: 0.2em 0.6em; text-align: right; }
table.ablate th:first-child, table.ablate td:first-child, table.ablate .text { text-align: left; }
table.ablate td:not(.text) { white-space: nowrap; }  /* an interval on one line: the page scrolls instead */
table.ablate caption { text-align: left; font-size: 1.15em; font-weight: bold; margin: 0.4em 0 0.2em; }
.scroll { overflow-x: auto; }
.notes, .legend { font-size: 0.85em; color: #555; }
ul.legend { margin: 0.2em 0 0.6em; padding-left: 1.2em; }
details { margin: 0.4em 0; border-top: 1px solid #eee; padding-top: 0.3em; }
details > summary { cursor: pointer; font-weight: bold; }
figure { margin: 0.6em 0; }
figure#forest { margin: 0.2em 0; }
figcaption { font-size: 0.85em; color: #444; margin-bottom: 0.3em; }
svg { max-width: 100%; height: auto; }
code { background: #f4f4f4; padding: 0 0.2em; }
"""

Section = tuple[str, pd.DataFrame, list[str]]  # a heading, a table and its notes


def page(title: str, summary: Summary, comparison: Section, legend: list[str], tables: list[Section], cards: str,
         plots: list[Path], absent: str, view: str = "") -> str:  # fmt: skip
    """The page: the question, the summary and the forest plot; the comparison table and its `legend` (a few lines);
    then, collapsed, the comparison's notes, each of `tables`, the other plots and the run cards (cards.md).

    `absent` says why there are no plots, when `plots` is empty; `view`: what a view changed, said under the title.
    """
    forest = next((p for p in plots if p.stem == "forest"), None)
    parts = [f"<h1>{html.escape(title)}</h1>"]
    if view:
        parts.append(f'<p class="view">{html.escape(view)}: not the experiment\'s declared report</p>')
    if summary.question:
        parts.append(f'<p class="question">Question: {html.escape(summary.question)}</p>')
    parts.append(f'<p class="summary" id="summary">{html.escape(summary.words)}</p>')
    if forest is not None:
        parts.append(_figure(forest, caption=False))
    heading, frame, notes = comparison
    parts.append(f'<div class="scroll" id="comparison">{to_html(frame, heading, [])}</div>')
    parts += ['<ul class="legend">', *(f"<li>{html.escape(line)}</li>" for line in legend), "</ul>"]
    if forest is not None:
        parts.append(_details("How to read the forest plot", f'<p class="notes">{html.escape(CAPTIONS["forest"])}</p>'))
    parts.append(_details("Notes on the comparison", _notes(notes), "notes"))
    for heading, frame, notes in tables:
        parts.append(_details(heading, f'<div class="scroll">{to_html(frame, heading, [])}</div>\n{_notes(notes)}'))
    others = [p for p in plots if p is not forest]
    if others:
        parts.append(_details("Plots", "\n".join(_figure(p) for p in others), "plots"))
    if not plots:
        parts.append(f'<p class="notes">No plots: {html.escape(absent)}.</p>')
    parts.append(_details("Run cards: what each run changes and what each seed cost", cards_html(cards), "cards"))
    return ('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            + "\n".join(parts) + "\n</body>\n</html>\n")  # fmt: skip


def _figure(path: Path, caption: bool = True) -> str:
    said = (f"<figcaption><b>{path.stem}</b>: {html.escape(CAPTIONS.get(path.stem, path.stem))}</figcaption>\n"
            if caption else "")  # fmt: skip
    return f'<figure id="{path.stem}">{said}{inline_svg(path, path.stem)}\n</figure>'


def _details(heading: str, body: str, anchor: str = "") -> str:
    """A collapsed section: its heading always shown, its body on a click."""
    ident = f' id="{anchor}"' if anchor else ""
    return f"<details{ident}>\n<summary>{html.escape(heading)}</summary>\n{body}\n</details>"


def _notes(notes: list[str]) -> str:
    items = [f"<li>{html.escape(note)}</li>" for note in notes]
    return "\n".join(['<ul class="notes">', *items, "</ul>"]) if notes else ""


def inline_svg(path: Path, prefix: str) -> str:
    """An SVG file's <svg> element, its ids and references to them prefixed; no XML declaration, DOCTYPE or metadata."""
    text = path.read_text(encoding="utf-8")
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", text[text.index("<svg") :], flags=re.DOTALL)
    return re.sub(r'(\bid="|href="#|url\(#)', rf"\1{prefix}-", svg)


def cards_html(markdown: str) -> str:
    """cards.md as HTML: `#` headings one level below the page's title, `- ` lines as list items, `code` as code."""
    out, in_list = [], False
    for line in markdown.splitlines():
        if in_list and not line.startswith("- "):
            out.append("</ul>")
            in_list = False
        if line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")) + 1, 6)
            out.append(f"<h{level}>{_inline(line.lstrip('#').strip())}</h{level}>")
        elif line.startswith("- "):
            if not in_list:
                out.append("<ul>")
                in_list = True
            out.append(f"<li>{_inline(line[2:])}</li>")
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
    return "\n".join(out + (["</ul>"] if in_list else []))


def _inline(text: str) -> str:
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))
