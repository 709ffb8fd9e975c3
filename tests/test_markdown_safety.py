"""report.md is safe in any Markdown viewer: every value that came from a file or a flag (run names, a run's folder,
manifest fields, option values, sweep names, data paths) is shown as written, plain or in a code span, and never made a
link, an image or HTML by a standard renderer (markdown-it's GFM-like preset with linkify, which links even a bare
`evil.com`); the only links are to the report's own files, and no bidirectional control character is shown raw, in
report.md or report.html."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from urllib.parse import unquote

import pytest
from markdown_it import MarkdownIt

from behavioral.analysis import analyze
from behavioral.report.formats import literal, pipe_table, visible
from behavioral.analysis.study import run_study
from behavioral.analysis.sweep import analyze_sweep
from behavioral.rundir.manifest import MANIFEST
from behavioral.inference.models import ModelLoadError, load
from behavioral.analysis.studies import get_study
from behavioral.suites import giebench, intergroup, isear, jaem, scm
from behavioral.sweep.config import read_sweep
from behavioral.sweep.runner import run_sweep
from tests.test_analysis import make_run
from tests.test_safety import _copy_run, suite_runs  # noqa: F401 (a fixture)

HOSTILE = ["[x](https://evil.example)", "![i](x)", "<script>window.pwned=1</script>", "<img src=x onerror=alert(1)>",
           "<iframe src=x></iframe>", "www.evil.com", "evil@evil.com", "http://evil.example", "a`b``c",
           "\u202eevil", "a\\|<img src=x onerror=alert(2)>"]
NAME = " ".join(HOSTILE)  # one run name (--names) holding every payload
FOLDER = "run`[x](javascript:alert(1))`<img src=x onerror=alert(3)>\u202e www.evil.com"  # a run folder's name
BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
MD = MarkdownIt("gfm-like", {"linkify": True})  # GFM tables, raw HTML, linkify with fuzzy links
ANALYZE = {  # each suite's analysis options: few resamples; jaem's lexicon and scm's ratings read from hostile paths
    "intergroup": lambda data: intergroup.AnalyzeOptions(permutations=20),
    "giebench": lambda data: giebench.AnalyzeOptions(bootstrap=20),
    "isear": lambda data: isear.AnalyzeOptions(bootstrap_cycles=20),
    "jaem": lambda data: jaem.AnalyzeOptions(vad_lexicon=str(data["jaem"])),
    "scm": lambda data: scm.AnalyzeOptions(human=str(data["scm"]), bootstrap=20),
}


def _tokens(tokens):
    """Every token of a markdown-it token stream, inline children included."""
    for token in tokens:
        yield token
        yield from _tokens(token.children or ())


def _own_file(report: Path, target: str) -> bool:
    """Whether a link's target is a file the analysis wrote beside (or below) `report`: a relative path down."""
    path = unquote(target)
    return bool(re.fullmatch(r"[\w.-]+(?:/[\w.-]+)*", path)) and ".." not in path.split("/") \
        and (report.parent / path).is_file()


def markup_made(report: Path) -> list[str]:
    """What a viewer makes of report.md that no value may become: raw HTML, a link or image to anything but the
    report's own files, a bidirectional control character shown raw (in the Markdown or its HTML page)."""
    text = report.read_text()
    found = [f"{t.type}: {t.content!r}" for t in _tokens(MD.parse(text)) if t.type in ("html_inline", "html_block")]
    found += [f"{t.type} to {t.attrGet(a)!r}" for t in _tokens(MD.parse(text))
              for kind, a in (("link_open", "href"), ("image", "src")) if t.type == kind
              and not _own_file(report, t.attrGet(a))]
    found += [f"{name}: raw {c!r}" for name, page in (("report.md", MD.render(text)),
                                                       ("report.html", (report.parent / "report.html").read_text()))
              for c in BIDI.findall(page)]
    return found


def shown_codes(report: Path) -> set[str]:
    """The texts of report.md's code spans as a viewer shows them."""
    return {t.content for t in _tokens(MD.parse(report.read_text())) if t.type == "code_inline"}


def make_hostile(run_dir: Path) -> Path:
    """`run_dir` with hostile manifest fields: model, revision, chat format, a data hash, the provenance's device,
    date and commit (the free text a manifest records; a run setting such as the dtype is refused unless it is one of
    the setting's values, tests/test_manifest.py)."""
    manifest = json.loads((run_dir / MANIFEST).read_text())
    manifest["config"] |= {"model": f"http://evil.example/{NAME}", "revision": NAME,
                           "chat_format": NAME, "model_hash": NAME, "corpus_hash": NAME, f"{NAME}_hash": NAME}
    manifest["provenance"] |= {"device": NAME, "created": NAME, "git_commit": NAME}
    (run_dir / MANIFEST).write_text(json.dumps(manifest))
    return run_dir


# --- the helper ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["a person from the United States", "Hispanic", "12.3%", "+1.2", "-0.5", "1,234",
                                   "—", "1.23e-05", "P0S0T0", "δ (points)", "gap_points_low", "intergroup--P0S0T0",
                                   "HuggingFaceTB/SmolLM2-135M-Instruct", "low answer mass: 12.3% of it (5.0%)"])
def test_a_value_that_forms_no_markup_stays_plain(value):
    assert literal(value) == value


@pytest.mark.parametrize("value", [*HOSTILE, "evil.com", "e.g. x", "1.2.3.4", "_x_", "a//b", "a:b", "x\ny", " a",
                                   "a&#x202e;b", "*x*", "~x~", "$x$", "#1", "a\tb"])
def test_a_value_that_could_form_markup_is_a_code_span_shown_as_written(value):
    tokens = list(_tokens(MD.parse(literal(value))))
    assert [t.content for t in tokens if t.type == "code_inline"] == [visible(value)]
    assert not {t.type for t in tokens} & {"link_open", "image", "html_inline", "html_block"}


def test_a_table_cell_stays_one_cell_in_its_code_span():
    tokens = list(_tokens(MD.parse(pipe_table(["run", "n"], [[value, "1"] for value in HOSTILE]))))
    assert [t.type for t in tokens].count("td_open") == 2 * len(HOSTILE)
    assert [t.content for t in tokens if t.type == "code_inline"] == [visible(value) for value in HOSTILE]
    assert not {t.type for t in tokens} & {"link_open", "image", "html_inline", "html_block"}


# --- the reports --------------------------------------------------------------------------------------------------

def test_an_analysis_of_hostile_names_folder_and_manifest_links_nothing(tmp_path):
    small = {"categories": ("religion",), "settings": ("P0S0T0",)}
    runs = [make_hostile(make_run(tmp_path / FOLDER, **small)), make_run(tmp_path / "www.evil.com", **small)]
    report = analyze(runs, tmp_path / "out", intergroup.AnalyzeOptions(permutations=20), names=[NAME, "evil.com"])
    assert markup_made(report) == []
    codes = shown_codes(report)
    assert {visible(NAME), "evil.com", visible(str(runs[0]))} <= codes
    html = (report.parent / "report.html").read_text()
    assert "\\u202eevil" in html and "<img src=x" not in html


@pytest.fixture(scope="module")
def hostile_data(tmp_path_factory) -> dict[str, Path]:
    """jaem's demo lexicon and scm's shipped ratings, copied to files whose names are hostile."""
    folder = tmp_path_factory.mktemp("data") / FOLDER
    folder.mkdir()
    shipped = Path(jaem.__file__).parent / "data" / "demo_vad.tsv", Path(scm.__file__).parent / "data" / \
        "us_stereotypes.csv"
    return {suite: Path(shutil.copy(path, folder / f"www.evil.com <b>{path.name}"))
            for suite, path in zip(("jaem", "scm"), shipped)}


@pytest.mark.parametrize("suite", ["intergroup", "giebench", "isear", "jaem", "scm"])
def test_every_suites_analysis_of_hostile_runs_links_nothing(suite, suite_runs, hostile_data, tmp_path):
    runs = [make_hostile(_copy_run(suite_runs[suite], tmp_path / FOLDER)),
            _copy_run(suite_runs[suite], tmp_path / "www.evil.com")]
    report = analyze(runs, tmp_path / "out", ANALYZE[suite](hostile_data), names=[NAME, "evil.com"])
    assert markup_made(report) == []
    assert visible(NAME) in shown_codes(report)


def test_a_study_report_of_a_hostile_run_name_links_nothing(pinned_run, tmp_path):
    options = get_study("clusters").Options(where=("category=race", "setting=P0S0T0"), permutations=5,
                                            project="last")
    result = run_study("clusters", [pinned_run], options, tmp_path / "out", names=[NAME], progress=False)
    assert markup_made(result.report) == []
    assert visible(NAME) in shown_codes(result.report)


SWEEP = """
[run]
device = "cpu"
dtype = "fp32"
batch_size = 4
max_new_tokens = 4
mode = "score"

[[model]]
name = "www.evil.com"
id = {model}

[[model]]
name = "evil.com"
id = "some-org/absent-model"

[suite.scm]
options = {{ groups = "us-stereotypes", traits = ["warm"], templates = ["f01"] }}

[suite.scm.settings."evil.com"]
[suite.scm.settings."x._y_"]
"""


def test_a_sweeps_top_page_of_hostile_names_links_nothing(tmp_path, long_model_dir):
    model = tmp_path / FOLDER / "http:" / "evil.example"  # a local model's path, shown in the runs table
    shutil.copytree(long_model_dir, model)
    path = tmp_path / f"{NAME.replace('/', '_')}.toml"
    path.write_text(SWEEP.format(model=json.dumps(str(model))))

    def load_or_fail(spec, *args):  # the absent model's error quotes hostile text, as the top page shows it
        if spec == "some-org/absent-model":
            raise ModelLoadError(f"model {NAME} not found on the hub")
        return load(spec, *args)

    run_sweep(read_sweep(path, tmp_path / "sweep"), progress=False, load=load_or_fail)
    report = analyze_sweep(tmp_path / "sweep")
    reports = sorted(report.parent.rglob("report.md"))  # the top page and each suite setting's
    assert len(reports) == 3 and {r: markup_made(r) for r in reports} == {r: [] for r in reports}
    assert "- [`scm--evil.com`](scm--evil.com/report.html)" in report.read_text()
    assert {"www.evil.com", "evil.com/scm--evil.com", "www.evil.com/scm--x._y_", visible(str(model))} <= \
        shown_codes(report)
