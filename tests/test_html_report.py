"""report.html beside every report.md: one self-contained page (figures embedded from the PNG files written, tables
printed with report.md's very cell texts, Markdown as HTML, every text escaped, nothing loaded from the network),
written by a suite's analysis and by a study; in headless Chromium its script runs without error, its images decode
and a click on a header sorts numbers as numbers."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from behavioral.analysis import Analysis, Figure, Section, Table, analyze, sized_figure
from behavioral.analysis.html import inline, markdown_html
from behavioral.analysis.study import run_study
from behavioral.analysis.write import write
from behavioral.analysis.output_folder import output_folder
from behavioral.analysis.studies import get_study
from behavioral.suites.intergroup.setting_analysis import AnalyzeOptions
from tests.test_analysis import make_run

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
SCRIPT_CELL = "<script>alert(1)</script>"


class Page(HTMLParser):
    """What a test reads of report.html: its tables (header and rows of cell texts), images' sources, scripts' and
    links' addresses."""

    def __init__(self, text: str):
        super().__init__()
        self.tables: list[list[list[str]]] = []  # each table's rows, the header first
        self.images: list[str] = []
        self.addresses: list[tuple[str, str]] = []  # (tag, src or href)
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("th", "td"):
            self._cell = []
        elif tag == "img":
            self.images.append(attrs["src"])
        self.addresses += [(tag, attrs[key]) for key in ("src", "href") if key in attrs]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("th", "td"):
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None


def shown_cell(cell: str) -> str:
    """A pipe table's cell as a Markdown viewer shows it: an escaped `|` as `|`, a code span as its text (CommonMark
    drops one space either side)."""
    cell = cell.replace("\\|", "|")
    span = re.fullmatch(r"(`+)(.*)\1", cell)
    if span is None:
        return cell
    text = span[2]
    return text[1:-1] if text[:1] == text[-1:] == " " and text.strip() else text


def markdown_tables(text: str) -> list[list[list[str]]]:
    """The pipe tables of report.md: each one's rows of cell texts as a viewer shows them, the header first, the
    separator left out."""
    tables, previous = [], ""
    for line in text.splitlines():
        if line.startswith("| "):
            if not previous.startswith("|"):
                tables.append([])
            tables[-1].append([shown_cell(cell) for cell in line[2:-2].split(" | ")])
        previous = line
    return tables


def png_bytes(source: str) -> bytes:
    prefix = "data:image/png;base64,"
    assert source.startswith(prefix)
    return base64.b64decode(source[len(prefix):])


def assert_self_contained(text: str, page: Page) -> None:
    """Nothing on the page loads anything from elsewhere: no script, stylesheet or image by address."""
    assert all(address.startswith("data:image/png;base64,") for tag, address in page.addresses if tag != "a")
    assert not re.search(r"<(link|iframe|object|embed)\b|@import|url\(", text)
    assert "default-src 'none'" in text  # and the page's policy forbids it


def assert_same_tables(folder: Path) -> Page:
    """report.html beside report.md prints the same tables with the same cell texts, and every figure of report.md
    as the very PNG bytes written; returns the parsed page."""
    text = (folder / "report.html").read_text()
    report = (folder / "report.md").read_text()
    page = Page(text)
    assert page.tables == markdown_tables(report) and page.tables
    shown = re.findall(r"^!\[[^\]]*\]\(([^)]+)\)$", report, re.M)
    assert [png_bytes(src) for src in page.images] == [(folder / name).read_bytes() for name in shown] and shown
    assert_self_contained(text, page)
    return page


def toy_analysis() -> Analysis:
    """Two sections: a table of shares (percent), differences (points), p-values (p) with a missing value and a cell
    that looks like a script, a second table, a figure, Markdown text with bold, code, a list and a link."""
    frame = pd.DataFrame({"group": ["b", "a", "c", SCRIPT_CELL], "share": [0.123, 0.4567, np.nan, 0.05],
                          "difference": [0.012, -0.031, 0.2, -0.5], "p": [0.0412, 0.000123, 0.5, np.nan]})
    shares = Table("shares", "Shares per group", frame, {"share": "percent", "difference": "points", "p": "p"},
                   note="`p`: two-sided")
    counts = Table("sub/counts", "Counts", pd.DataFrame({"n": [1200, 3], "label": ["x & y", "z"]}), {"n": "count"})
    fig = sized_figure(2, 2)
    fig.subplots().plot([0, 1], [1, 0])
    return Analysis("Toy <analysis>", "A *test* source; see [the card](card.md).", [
        Section("Numbers", "**Read** `share` first:\n- one\n- two", (shares,)),
        Section("Picture", "A figure & a table.", (counts,), (Figure("figures/line", "A line", fig),))],
        notes=["a note with `code`"])


@pytest.fixture
def toy(tmp_path) -> Path:
    """The toy analysis written through an output folder, as a command writes it."""
    with output_folder(tmp_path / "out", "analyze toy", {}) as folder:
        write(toy_analysis(), [], {"permutations": 10}, folder.path)
    return tmp_path / "out"


def test_the_page_prints_every_table_and_figure_of_report_md_and_loads_nothing(toy):
    page = assert_same_tables(toy)
    assert len(page.tables) == 2
    assert page.tables[0] == [["group", "share", "difference", "p"], ["b", "12.3%", "+1.2", "0.0412"],
                              ["a", "45.7%", "-3.1", "0.000123"], ["c", "—", "+20.0", "0.5"],
                              [SCRIPT_CELL, "5.0%", "-50.0", "—"]]
    assert page.tables[1] == [["n", "label"], ["1,200", "x & y"], ["3", "z"]]
    assert len(page.images) == 1 and png_bytes(page.images[0]) == (toy / "figures" / "line.png").read_bytes()
    manifest = json.loads((toy / "manifest.json").read_text())
    assert "report.html" in manifest["output"]["files"] and "report.html" in (toy / "report.md").read_text()


def test_text_is_escaped_and_the_markdown_the_reports_use_is_html(toy):
    text = (toy / "report.html").read_text()
    assert SCRIPT_CELL not in text and "<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>" in text
    assert "<title>Toy &lt;analysis&gt;</title>" in text and "<td>x &amp; y</td>" in text
    assert '<p>A <em>test</em> source; see <a href="card.md">the card</a>.</p>' in text
    assert "<p><strong>Read</strong> <code>share</code> first:</p>\n<ul>\n<li>one</li>\n<li>two</li>\n</ul>" in text
    assert "<p><strong>Shares per group</strong> <code>p</code>: two-sided</p>" in text
    assert '<li><a href="sub/counts.csv">sub/counts.csv</a>, <a href="sub/counts.md">sub/counts.md</a>: Counts</li>' \
        in text and '<a href="report.html">report.html</a>' in text


@pytest.mark.parametrize("markdown, html", [
    ("**Answers (`a*b`: x, `c`: y)**", "<strong>Answers (<code>a*b</code>: x, <code>c</code>: y)</strong>"),
    ("*prompts*: rows; gap_points_*: the rest", "<em>prompts</em>: rows; gap_points_*: the rest"),
    ("2 * 3 * 4", "2 * 3 * 4"),
    ("[x](javascript:alert(1)) [y](https://example.org/a?b=1&c=2) [z](sub/z.csv)",
     '[x](javascript:alert(1)) [y](https://example.org/a?b=1&amp;c=2) <a href="sub/z.csv">z</a>'),  # own files only
    ('`<b>` "q"', "<code>&lt;b&gt;</code> &quot;q&quot;"),
])
def test_inline_markdown(markdown, html):
    assert inline(markdown) == html


def test_a_list_item_goes_on_over_the_next_line_and_an_empty_line_ends_it():
    assert markdown_html("**Can show:**\n- a\n  b\n\nc\nd") == \
        "<p><strong>Can show:</strong></p>\n<ul>\n<li>a\n  b</li>\n</ul>\n<p>c\nd</p>"


def test_a_suite_analysis_writes_the_page_beside_report_md(tmp_path):
    run_dir = make_run(tmp_path / "run")
    report = analyze([run_dir], tmp_path / "out", AnalyzeOptions(permutations=50))
    page = assert_same_tables(report.parent)
    assert len(page.images) >= 3 and len(page.tables) >= 5
    assert any({"δ", "null low", "null high", "gap (points)"} <= set(table[0]) for table in page.tables)  # Table 2
    assert "report.html" in json.loads((report.parent / "manifest.json").read_text())["output"]["files"]


def test_a_study_writes_the_page_beside_report_md(pinned_run, tmp_path):
    options = get_study("clusters").Options(where=("category=race", "setting=P0S0T0"), permutations=5,
                                            project="last")
    result = run_study("clusters", [pinned_run], options, tmp_path / "out", progress=False)
    page = assert_same_tables(result.folder)
    assert page.images and "report.html" in result.manifest["output"]["files"]


# --- in a browser -------------------------------------------------------------------------------------------------

# Run first on the page: record errors (uncaught, console.error, a blocked load); once loaded, record the tables'
# headers, the images decoded, and the first column of the first table after clicks on headers; all as JSON in an
# attribute of <html> for --dump-dom to print.
PROBE = """<script>
const errors = [];
addEventListener("error", e => errors.push(String(e.message)));
addEventListener("securitypolicyviolation", e => errors.push("blocked " + e.blockedURI));
const consoleError = console.error;
console.error = (...args) => { errors.push(args.join(" ")); consoleError(...args); };
addEventListener("load", () => {
  const table = document.querySelector("table"), heads = table.tHead.rows[0].cells;
  const column = () => Array.from(table.tBodies[0].rows, row => row.cells[0].textContent);
  const sorted = [];
  for (const name of ["share", "difference", "difference", "p", "group"]) {
    const th = Array.from(heads).find(h => h.textContent.trim() === name);
    if (!th) continue;
    th.click();
    sorted.push([name, th.getAttribute("aria-sort"), column()]);
  }
  const images = Array.from(document.images);
  document.documentElement.dataset.probe = JSON.stringify({
    errors, sorted,
    headers: Array.from(document.querySelectorAll("table"), t => Array.from(t.tHead.rows[0].cells, c => c.textContent)),
    images: images.length, decoded: images.filter(i => i.complete && i.naturalWidth > 0).length,
  });
});
</script>"""


def browser() -> str:
    found = next(filter(None, map(shutil.which, BROWSERS)), None)
    if found is None:
        pytest.skip(f"no headless browser: none of {', '.join(BROWSERS)} is on PATH (Debian: apt-get install chromium)")
    return found


def in_browser(page: Path, profile: Path, probe: str = PROBE) -> tuple[dict, str]:
    """`page` with `probe` run first (before the page's policy, which would forbid it), loaded in headless Chromium:
    what the probe recorded, and the browser's log."""
    probed = page.with_name("probed.html")
    probed.write_text(page.read_text().replace("<head>", "<head>\n" + probe, 1))
    done = subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--dump-dom",
                           probed.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'data-probe="([^"]*)"', done.stdout)
    assert found, f"the probe recorded nothing; the browser said: {done.stderr[-2000:]}"
    return json.loads(unescape(found[1])), done.stderr


@pytest.mark.slow
def test_in_a_browser_the_page_runs_without_error_shows_every_image_and_sorts_numbers_as_numbers(toy, tmp_path):
    probe, log = in_browser(toy / "report.html", tmp_path / "profile")
    assert probe["errors"] == [] and "CONSOLE" not in log
    assert probe["headers"] == [["group", "share", "difference", "p"], ["n", "label"]]
    assert probe["images"] == probe["decoded"] == 1
    assert probe["sorted"] == [  # each header clicked in turn: (its name, the order shown, the group column)
        ["share", "ascending", [SCRIPT_CELL, "b", "a", "c"]],  # 5.0% < 12.3% < 45.7%, the missing share last
        ["difference", "ascending", [SCRIPT_CELL, "a", "b", "c"]],  # -50.0 < -3.1 < +1.2 < +20.0
        ["difference", "descending", ["c", "b", "a", SCRIPT_CELL]],  # clicked again
        ["p", "ascending", ["a", "b", "c", SCRIPT_CELL]],  # 0.000123 < 0.0412 < 0.5, the missing p last
        ["group", "ascending", [SCRIPT_CELL, "a", "b", "c"]],
    ]


@pytest.mark.slow
def test_in_a_browser_a_suite_analysis_page_shows_every_table_and_figure(tmp_path):
    report = analyze([make_run(tmp_path / "run")], tmp_path / "out", AnalyzeOptions(permutations=50))
    page = Page(report.with_name("report.html").read_text())
    probe, log = in_browser(report.with_name("report.html"), tmp_path / "profile")
    assert probe["errors"] == [] and "CONSOLE" not in log
    assert probe["headers"] == [table[0] for table in page.tables]
    assert probe["images"] == probe["decoded"] == len(page.images) > 0


@pytest.mark.slow
def test_in_a_browser_a_study_page_shows_every_table_and_figure(pinned_run, tmp_path):
    options = get_study("clusters").Options(where=("category=race", "setting=P0S0T0"), permutations=5,
                                            project="last")
    result = run_study("clusters", [pinned_run], options, tmp_path / "out", progress=False)
    page = Page(result.folder.joinpath("report.html").read_text())
    probe, log = in_browser(result.folder / "report.html", tmp_path / "profile")
    assert probe["errors"] == [] and "CONSOLE" not in log
    assert probe["headers"] == [table[0] for table in page.tables]
    assert probe["images"] == probe["decoded"] == len(page.images) > 0
