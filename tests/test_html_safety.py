"""report.html makes no link of user-given text and runs no script but its own: a Markdown link becomes <a> only
where it leads to one of the report's own files (a relative path down from its folder), any other target stays
text; a user-given value in a code span stays in it whatever backticks it holds; the page's policy lets only its
sort script run, by that script's hash; in headless Chromium a report built from hostile run names, run folder,
title and texts runs no injected script on a click on each of its links, and its tables still sort."""

from __future__ import annotations

import base64
import hashlib
import re
from html import escape, unescape
from pathlib import Path

import pandas as pd
import pytest

from behavioral.analysis import Analysis, Figure, Section, Table, sized_figure
from behavioral.analysis.html import POLICY, inline, render_html
from behavioral.analysis.report import code_span, run_line
from behavioral.analysis.runs import read_runs
from behavioral.analysis.write import write
from behavioral.analysis.output_folder import output_folder
from behavioral.suite.registry import get_suite
from tests.test_analysis import make_run
from tests.test_html_report import in_browser

# A javascript: link's script as a browser runs it: marks the window and leaves the page as it is (its value is
# undefined); no ")" or space, so the old link pattern took it whole.
PAYLOAD = "window.pwned=1;undefined"
SMUGGLED = f"[click](\x01javascript:{PAYLOAD})"  # a browser drops the \x01 and follows javascript:
HOSTILE = [SMUGGLED, f"[click](javascript:{PAYLOAD})", f"`a`{SMUGGLED}`b`", f"**{SMUGGLED}**",
           f"<script>{PAYLOAD}</script>", f'<img src=x onerror="{PAYLOAD}">', f'" onmouseover="{PAYLOAD}']
MARKUP = {"code", "/code", "strong", "/strong", "em", "/em"}  # the only tags inline() may write of hostile text


@pytest.mark.parametrize("markdown", [
    "[x](\x01javascript:alert(1))", "[x](\x01javascript:alert`1`)", f"[x](javascript:{PAYLOAD})",
    "[x](JaVaScRiPt:alert(1))", "[x]( javascript:alert(1))", "[x](\x0bjavascript:alert(1))",
    "[x](%01javascript:alert(1))", "[x](javascript&colon;alert(1))", "[x](data:text/html,<script>alert(1)</script>)",
    "[x](//evil.example/)", "[x](/etc/passwd)", "[x](../../etc/passwd)", "[x](a/../../b)", "[x](./report.html)",
    "[x](\\\\evil.example\\share)", "[x](https://evil.example/)", '[x](a.csv"onmouseover="alert(1))',
    "<img src=x onerror=alert(1)>", "`a`[x](\x01javascript:alert(1))`b`", "**[x](\x01javascript:alert(1))**",
    "`` ` ``[x](\x01javascript:alert(1))", "\x000\x00 [x](\x01javascript:alert(1))",
])
def test_hostile_markdown_makes_no_link_and_no_tag(markdown):
    html = inline(markdown)
    assert "<a" not in html and set(re.findall(r"<(/?\w+)", html)) <= MARKUP
    assert unescape(re.sub(r"</?(code|strong|em)>", "", html)).count("javascript") == markdown.count("javascript")


def test_a_smuggled_target_stays_the_text_written():
    assert inline("see [x](\x01javascript:alert(1)).") == "see [x](\x01javascript:alert(1))."
    assert inline('[x](a.csv"onclick="alert(1))') == "[x](a.csv&quot;onclick=&quot;alert(1))"


@pytest.mark.parametrize("markdown, html", [
    ("[intergroup](intergroup/report.html)", '<a href="intergroup/report.html">intergroup</a>'),
    ("[headline.csv](headline.csv)", '<a href="headline.csv">headline.csv</a>'),
    ("[Markdown](intergroup--P0S0T0/report.md)", '<a href="intergroup--P0S0T0/report.md">Markdown</a>'),
    ("[a figure](figures/modèle_gap.png)", '<a href="figures/modèle_gap.png">a figure</a>'),  # a run's file stem
    ("**[x.csv](x.csv)**", '<strong><a href="x.csv">x.csv</a></strong>'),
])
def test_links_to_the_reports_own_files_stay_links(markdown, html):
    assert inline(markdown) == html


@pytest.mark.parametrize("value", ["/runs/plain", "run`[x](\x01javascript:alert(1))`", "`", "a``b`", " padded ",
                                   "two\nlines", "<b>&"])
def test_a_code_span_shows_the_value_whole_in_one_code_element(value):
    shown = re.sub(r"[\x00-\x1f]", lambda m: f"\\x{ord(m[0]):02x}", value)
    assert "\n" not in code_span(value) and inline(code_span(value)) == f"<code>{escape(shown)}</code>"


@pytest.fixture
def hostile_runs(tmp_path):
    """One intergroup run in a folder whose name breaks out of a code span, named (as by --names) with a link."""
    run_dir = make_run(tmp_path / f"run`{SMUGGLED}`")
    return read_runs(get_suite("intergroup"), [run_dir], names=[SMUGGLED])


def test_a_run_line_keeps_the_folder_in_its_code_span_and_links_nothing(hostile_runs):
    html = inline(run_line(hostile_runs[0]).removeprefix("- "))
    shown = str(hostile_runs[0].run_dir).replace("\x01", "\\x01")
    assert "<a" not in html and f"<code>{escape(shown)}</code>" in html


def hostile_analysis() -> Analysis:
    """An analysis whose every user-given text is hostile: title, source, section titles and texts, a table's
    header, cells and note, a figure's title, the notes; its file names are the code's."""
    text = " ".join(HOSTILE)
    frame = pd.DataFrame({text: HOSTILE, "n": range(len(HOSTILE), 0, -1)})
    fig = sized_figure(2, 2)
    fig.subplots().plot([0, 1], [1, 0])
    return Analysis(text, text, [Section(text, "\n".join(f"- {h}" for h in HOSTILE),
                                         (Table("hostile", text, frame, {"n": "count"}, note=text),),
                                         (Figure("figures/hostile", text, fig),))], notes=HOSTILE)


@pytest.fixture
def hostile(tmp_path, hostile_runs) -> Path:
    """The hostile analysis of the hostile run written as a command writes it; its folder."""
    with output_folder(tmp_path / "out", "analyze hostile", {}) as folder:
        write(hostile_analysis(), hostile_runs, {"label": SMUGGLED}, folder.path)
    return tmp_path / "out"


def test_the_policy_lets_only_the_pages_own_script_run(hostile):
    page = (hostile / "report.html").read_text()
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    policy = unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)[1])
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode("ascii")
    assert len(scripts) == 1 and policy == POLICY and directives["script-src"] == f"'sha256-{digest}'"
    assert directives["default-src"] == "'none'" and directives["base-uri"] == directives["form-action"] == "'none'"
    assert "<a " not in page.split("<h2>Files</h2>")[0]  # no user-given text before the files' list is a link


# Run first on the page (before its policy): once loaded, click the first table's first header, then every link; a
# link to a file is kept from leaving the page (the page is what is read), a javascript: link is followed; then
# record the links' addresses, the header's order, whether any injected script ran and what the policy blocked.
LINK_PROBE = """<script>
const violations = [];
addEventListener("securitypolicyviolation", e => violations.push(e.violatedDirective));
addEventListener("load", () => {
  const th = document.querySelector("thead th");
  th.click();
  const links = Array.from(document.querySelectorAll("a"), a => a.href);
  for (const a of document.querySelectorAll("a")) {
    a.addEventListener("click", e => { if (a.protocol !== "javascript:") e.preventDefault(); });
    a.click();
  }
  setTimeout(() => document.documentElement.dataset.probe = JSON.stringify(
    {links, sorted: th.getAttribute("aria-sort"), pwned: window.pwned ?? null, violations}), 1000);
});
</script>"""
OWN_FILES = ["hostile.csv", "hostile.md", "figures/hostile.png", "figures/hostile.pdf", "report.html", "manifest.json"]


@pytest.mark.slow
def test_in_a_browser_no_click_on_a_link_of_a_hostile_report_runs_script(hostile, tmp_path):
    probe, log = in_browser(hostile / "report.html", tmp_path / "profile", LINK_PROBE)
    assert probe["pwned"] is None and probe["violations"] == [] and "CONSOLE" not in log
    assert probe["links"] == [f"{hostile.as_uri()}/{name}" for name in OWN_FILES]
    assert probe["sorted"] == "ascending"  # the page's own script runs


@pytest.mark.slow
def test_in_a_browser_the_policy_alone_stops_a_slip(tmp_path):
    """Markup that a future slip might let through, put in the page by hand: the policy blocks its every script."""
    (tmp_path / "figures").mkdir()
    sized_figure(2, 2).savefig(tmp_path / "figures" / "hostile.png")
    slip = (f'<a href="javascript:{PAYLOAD}">x</a><script>{PAYLOAD}</script><svg onload="{PAYLOAD}"></svg>'
            f'<img src="data:image/png;base64,iVBORw0KGgo=" onerror="{PAYLOAD}">')
    page = render_html(hostile_analysis(), [], {}, tmp_path).replace("<body>", "<body>\n" + slip, 1)
    (tmp_path / "report.html").write_text(page)
    probe, _ = in_browser(tmp_path / "report.html", tmp_path / "profile", LINK_PROBE)
    assert probe["pwned"] is None and probe["sorted"] == "ascending"
    assert sorted(probe["violations"]) == ["script-src-attr", "script-src-attr", "script-src-elem", "script-src-elem"]
