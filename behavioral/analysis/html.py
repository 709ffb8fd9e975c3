"""report.html: the report's blocks (behavioral.analysis.report) as one self-contained page to open offline: inline
CSS, figures embedded from the PNG files already written, every printed table an HTML table of the same cell texts
as report.md, sortable by a click on a header (a few lines of inline script, the only script the page's policy lets
run), and the Markdown text as HTML, its links only to the report's own files."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Sequence
from html import escape
from pathlib import Path

from behavioral.report.formats import visible
from behavioral.analysis.report import Block, Heading, Text, blocks, caption
from behavioral.analysis.runs import Run
from behavioral.report.blocks import Analysis, Table

STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; color: #1a1a1a; margin: 0 auto; max-width: 1200px; padding: 1em 2em; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ddd; margin-top: 2em; padding-bottom: .2em; }
code { background: #f2f2f2; border-radius: 3px; font-size: .9em; padding: 0 .25em; overflow-wrap: anywhere; }
.table { overflow-x: auto; margin: .5em 0 1.5em; }
table { border-collapse: collapse; font-size: .85em; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #eef1f5; cursor: pointer; position: sticky; top: 0; user-select: none; }
th[aria-sort=ascending]::after { content: " \\25B2"; } th[aria-sort=descending]::after { content: " \\25BC"; }
tbody tr:nth-child(even) { background: #f8f9fb; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: .9em; }
"""
# Sort a table by the clicked header's column, ascending then descending: numbers as numbers where every cell of the
# column holds one (12.3%, +1.2 and 12,345 included), else as text with digits compared as numbers; "—" (missing)
# and empty cells last either way.
SORT = """
function cellNumber(text) {
  const t = text.replace(/,/g, "").replace(/%$/, "").replace(/^\\+/, "");
  return t !== "" && isFinite(t) ? Number(t) : NaN;
}
function sortBy(th) {
  const table = th.closest("table"), body = table.tBodies[0], column = th.cellIndex;
  const order = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
  for (const other of th.parentNode.cells) other.removeAttribute("aria-sort");
  th.setAttribute("aria-sort", order > 0 ? "ascending" : "descending");
  const text = row => row.cells[column].textContent.trim(), missing = t => t === "" || t === "\\u2014";
  const rows = Array.from(body.rows);
  const numeric = rows.every(row => missing(text(row)) || !isNaN(cellNumber(text(row))));
  rows.sort((a, b) => {
    const x = text(a), y = text(b);
    if (missing(x) || missing(y)) return missing(x) - missing(y);
    return order * (numeric ? cellNumber(x) - cellNumber(y) : x.localeCompare(y, undefined, {numeric: true}));
  });
  body.append(...rows);
}
for (const th of document.querySelectorAll("thead th")) th.addEventListener("click", () => sortBy(th));
"""


def _policy(script: str) -> str:
    """The page's Content-Security-Policy: nothing loaded from anywhere, images only from data: URIs, style inline,
    and no script but `script`, allowed by its hash (so no injected script, handler or javascript: link runs)."""
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode("ascii")
    return (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; "
            "base-uri 'none'; form-action 'none'")


POLICY = _policy(SORT)
_CODE = re.compile(r"(?<!`)(`+)(?!`)([^\n]+?)(?<!`)\1(?!`)")  # a code span: the same run of backticks either side
_LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s]+)\)")
_OWN_FILE = re.compile(r"[\w.-]+(?:/[\w.-]+)*")  # a relative path: no scheme, host, leading "/" or odd character
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*", re.S)
_ITALIC = re.compile(r"(?<![\w*])\*(?=\S)([^*]+?)(?<=\S)\*(?![\w*])")


def _own_file(target: str) -> bool:
    """Whether a link's target is one of the report's own files: a relative path down from its folder."""
    return bool(_OWN_FILE.fullmatch(target)) and not {".", ".."} & set(target.split("/"))


def _link(match: re.Match) -> str:
    """A Markdown link as HTML where it leads to one of the report's own files, else its text as written."""
    return f'<a href="{match[2]}">{match[1]}</a>' if _own_file(match[2]) else match[0]


def _code(match: re.Match) -> str:
    """A code span's text: a space either side, set off from backticks, is dropped (as CommonMark does)."""
    text = match[2]
    return text[1:-1] if text[0] == text[-1] == " " and text.strip() else text


def inline(text: str) -> str:
    """A line of Markdown as HTML: code spans, links to the report's own files, bold and italic marked up, every
    other character escaped."""
    codes: list[str] = []

    def hide(match: re.Match) -> str:  # a code span is shown as written, whatever marks it holds
        codes.append(_code(match))
        return f"\0{len(codes) - 1}\0"

    text = _LINK.sub(_link, _CODE.sub(hide, escape(text.replace("\0", "\ufffd"))))  # \0 marks the hidden spans
    text = _ITALIC.sub(r"<em>\1</em>", _BOLD.sub(r"<strong>\1</strong>", text))
    return re.sub("\0(\\d+)\0", lambda m: f"<code>{codes[int(m[1])]}</code>", text)


def markdown_html(text: str) -> str:
    """Markdown as the reports write it, paragraphs and `- ` bullet lists (a line that follows an item continues it,
    an empty line ends either), as HTML."""
    parts: list[tuple[str, list[str]]] = []  # (tag, its paragraph or list items)
    in_block = False
    for line in text.splitlines():
        if not line.strip():
            in_block = False
        elif line.startswith(("- ", "* ")):
            if not (in_block and parts[-1][0] == "ul"):
                parts.append(("ul", []))
            parts[-1][1].append(line[2:])
            in_block = True
        elif in_block:
            parts[-1][1][-1] += "\n" + line
        else:
            parts.append(("p", [line]))
            in_block = True
    return "\n".join(f"<p>{inline(lines[0])}</p>" if tag == "p" else
                     "<ul>\n" + "".join(f"<li>{inline(item)}</li>\n" for item in lines) + "</ul>"
                     for tag, lines in parts)


def _table(table: Table) -> str:
    """A printed table: its caption, then its cells as report.md shows them (controls escaped, see visible)."""
    headers, rows = table.printed()
    head = "".join(f"<th>{escape(visible(c))}</th>" for c in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(visible(text))}</td>" for text in row) + "</tr>\n" for row in rows)
    return (f"{markdown_html(caption(table))}\n<div class=\"table\"><table>\n<thead><tr>{head}</tr></thead>\n"
            f"<tbody>\n{body}</tbody></table></div>")


def _html(block: Block, folder: Path) -> str:
    """One block as HTML; a figure's PNG is read from `folder`, where it was saved."""
    if isinstance(block, Heading):
        return f"<h{block.level}>{inline(block.text)}</h{block.level}>"
    if isinstance(block, Text):
        return markdown_html(block.markdown)
    if isinstance(block, Table):
        return _table(block)
    png = base64.b64encode((folder / f"{block.name}.png").read_bytes()).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{png}" alt="{escape(block.title)}">'
            f"<figcaption>{inline(block.title)}</figcaption></figure>")


def render_html(analysis: Analysis, runs: Sequence[Run], options: dict, folder: Path) -> str:
    """The report as one HTML page; `folder` holds the figures' PNG files written for it."""
    body = "\n".join(_html(block, folder) for block in blocks(analysis, runs, options))
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(analysis.title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}\n"
            f"<script>{SORT}</script>\n</body>\n</html>\n")
