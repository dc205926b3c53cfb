"""report/index.html: an experiment's report on one self-contained page: tables, notes, run cards, plots.

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
from ablate.report.tables import to_html

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
table.ablate { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
table.ablate th, table.ablate td { border-bottom: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
table.ablate th:first-child, table.ablate td:first-child, table.ablate .text { text-align: left; }
table.ablate td:not(.text) { white-space: nowrap; }  /* an interval on one line: the page scrolls instead */
table.ablate caption { text-align: left; font-size: 1.3em; font-weight: bold; margin: 1em 0 0.3em; }
.scroll { overflow-x: auto; }
.notes { font-size: 0.85em; color: #555; }
figure { margin: 1.5em 0; }
figcaption { font-size: 0.9em; color: #444; margin-bottom: 0.5em; }
svg { max-width: 100%; height: auto; }
code { background: #f4f4f4; padding: 0 0.2em; }
"""


def page(title: str, tables: list[tuple[str, pd.DataFrame, list[str]]], cards: str, plots: list[Path],
         absent: str) -> str:  # fmt: skip
    """The page: each of `tables` (its heading as caption, then its notes), the run cards (cards.md), the plots.

    `absent` says why there are no plots, when `plots` is empty.
    """
    parts = [f"<h1>{html.escape(title)}</h1>"]
    for heading, frame, notes in tables:  # the heading as the table's caption
        parts.append(f'<div class="scroll">{to_html(frame, heading, [])}</div>')
        parts += ['<ul class="notes">', *(f"<li>{html.escape(note)}</li>" for note in notes), "</ul>"] if notes else []
    parts += [cards_html(cards), "<h2>Plots</h2>"]
    for path in plots:
        caption = html.escape(CAPTIONS.get(path.stem, path.stem))
        parts.append(f'<figure id="{path.stem}"><figcaption><b>{path.stem}</b>: {caption}</figcaption>\n'
                     f"{inline_svg(path, path.stem)}\n</figure>")  # fmt: skip
    if not plots:
        parts.append(f'<p class="notes">No plots: {html.escape(absent)}.</p>')
    return ('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            + "\n".join(parts) + "\n</body>\n</html>\n")  # fmt: skip


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
