"""A sweep's analysis: each suite setting's cross-model analysis (the suite's own, through the framework) in a
sub-folder, and one top page: per model and suite the headline numbers with their intervals and sample sizes, the
runs' provenance, and what is partial, failed or not started."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from behavioral.analysis.report import REPORT, code_span
from behavioral.analysis.runs import provenance_fields
from behavioral.analysis.spec import Analysis, Section, Table
from behavioral.analysis.write import suite_analysis, write
from behavioral.files import write_json_atomic
from behavioral.manifest import MANIFEST, read_manifest
from behavioral.provenance import provenance
from behavioral.registry import get_suite
from behavioral.output_folder import output_folder
from behavioral.sweep.folder import ANALYSIS_DIR, RunRecord, SweepState, progress, read_state, slot

HEADLINE = "headline"
HEADLINE_COLUMNS = ["model", "suite", "setting", "measure", "value", "low", "high", "interval", "n", "n_unit",
                    "warning", "note"]
SOURCE = ("Each suite's numbers come from its own analysis (sub-folders below, named suite or suite--setting), which "
          "says how each interval is computed and what it cannot show; this page gathers the headline rows each "
          "suite declares.")


def run_status(out: Path, record: RunRecord, state: SweepState) -> str:
    """finished, partial (k of n work units), failed (the reason) or not started, read from the run directory."""
    done, failed = progress(out), state.failed.get(record.name)
    if done is None:
        return f"failed: {failed}" if failed else "not started"
    units, planned = done
    if planned is not None and units >= planned:
        return "finished"
    failed = f"; failed: {failed}" if failed else ""
    return f"partial: {units} of {'?' if planned is None else planned} work units{failed}"


def _provenance(records: Sequence[RunRecord], dirs: dict[str, Path], statuses: dict[str, str]) -> pd.DataFrame:
    """One row per run: model, weights hash, revision, dtype, mode, code and date, and its status."""
    rows = []
    for record in records:
        out = dirs[record.name]
        made = provenance_fields(read_manifest(out)) if (out / MANIFEST).is_file() else {}
        rows.append({"run": record.name, "model": record.model_spec,
                     "model_hash": (made.get("model_hash") or "")[:12], "revision": made.get("revision"),
                     "dtype": made.get("dtype"), "mode": made.get("mode"), "git": (made.get("git_commit") or "")[:10],
                     "created": made.get("created"), "status": statuses[record.name]})
    return pd.DataFrame(rows)


def analyze_sweep(folder: str | Path, out: str | Path | None = None, allow_partial: bool = False) -> Path:
    """Analyze a sweep folder into `out` (default SWEEP/analysis) and return the top page's report.md: each suite
    setting's runs analyzed together (named by their models; with `allow_partial`, partial runs too), the top page
    built from the headline table each suite declares. Only runs inside the folder whose manifests agree with their
    place are read (see slot); a suite setting none of whose runs can be read is listed, not fatal; every number is
    computed before anything is written."""
    folder = Path(folder)
    state = read_state(folder)
    dirs = {r.name: slot(folder, r) for r in state.runs}
    statuses = {r.name: run_status(dirs[r.name], r, state) for r in state.runs}
    done = {name for name, s in statuses.items() if s == "finished" or (allow_partial and s.startswith("partial"))}
    groups: dict[str, list[RunRecord]] = {}
    for r in state.runs:
        groups.setdefault(r.label, []).append(r)
    analyses, headlines, records, refused = {}, [], {}, {}
    for label, group in groups.items():
        ready = [r for r in group if r.name in done]
        if not ready:
            continue
        try:
            analysis, runs, settings, record = suite_analysis([dirs[r.name] for r in ready], None,
                                                              [r.model for r in ready], allow_partial)
        except ValueError as err:  # e.g. a model that never answers: the suite says so, the other suites go on
            refused[label] = str(err)
            continue
        analyses[label] = (analysis, runs, settings)
        records[label] = record
        headlines += _headlines(analysis, ready)
    top = _top_page(state, statuses, dirs, headlines, list(analyses), refused, folder, allow_partial)
    final = Path(out) if out is not None else folder / ANALYSIS_DIR
    record = {"sweep": str(folder.resolve()), "config_sha256": state.sha256, "allow_partial": allow_partial,
              "analyses": records, "statuses": statuses, "refused": refused}
    with output_folder(final, "analyze sweep", record) as staged:
        for label, (analysis, runs, settings) in analyses.items():
            write(analysis, runs, settings, staged.sub(label))
            write_json_atomic(staged.sub(label) / MANIFEST, {"provenance": provenance()} | records[label])
        write(top, [], {"allow_partial": allow_partial}, staged.path)
    return final / REPORT


def setting_text(record: RunRecord) -> str:
    """A run's suite setting as a reader needs it: its name where the sweep names one, then every option that
    differs from the suite's default ("default options" where none does)."""
    declared = get_suite(record.suite).Options
    defaults = json.loads(json.dumps(dataclasses.asdict(declared()))) if declared is not None else {}  # as recorded
    changed = [f"{key} {_value_text(value)}" for key, value in (record.options or {}).items()
               if key not in defaults or defaults[key] != value]
    return ": ".join(filter(None, (record.setting, ", ".join(changed) or "default options")))


def _value_text(value) -> str:
    """An option's value in a table cell: a list as its items, anything else as written."""
    return " ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _headlines(analysis: Analysis, records: Sequence[RunRecord]) -> list[dict]:
    """The rows of a suite analysis' headline table, keyed by model, suite and setting."""
    table = next((t for t in analysis.tables() if t.name == HEADLINE), None)
    if table is None:
        return []
    by_model = {r.model: r for r in records}
    return [{"model": row["run"], "suite": by_model[row["run"]].suite,
             "setting": setting_text(by_model[row["run"]]), **{c: row[c] for c in HEADLINE_COLUMNS[3:]}}
            for row in table.frame.to_dict("records")]


def _top_page(state: SweepState, statuses: dict[str, str], dirs: dict[str, Path], headlines: list[dict],
              labels: list[str], refused: dict[str, str], folder: Path, allow_partial: bool) -> Analysis:
    """The sweep's top page: headline numbers, links to each suite setting's analysis, the runs' provenance, what is
    not finished and which suites' analyses refused their runs."""
    frame = pd.DataFrame(headlines, columns=HEADLINE_COLUMNS)
    text = {c: "text" for c in ("model", "suite", "setting", "measure", "interval", "n_unit", "warning", "note")}
    table = Table(HEADLINE, "Headline numbers per model and suite", frame, formats=text | {"n": "count"},
                  definitions={"setting": "the sweep's name for the suite setting, then the options that differ "
                                          "from the suite's defaults.",
                               "value, low, high": "the suite's headline number and its interval over n sampled "
                                                   "units (what it is over in `interval`); each suite's analysis "
                                                   "says how it is computed.",
                               "warning": "what about the run makes the number doubtful (low answer mass, one "
                                          "answer for almost every item, few parsable replies, refusals, a partial "
                                          "run); its suite's page gives the counts.",
                               "note": "what the number cannot show."})
    unfinished = {name: s for name, s in statuses.items() if s != "finished"}
    links = "\n".join(f"- [{label}]({label}/report.html) ([Markdown]({label}/report.md))" for label in labels)
    sections = [Section("Headline numbers", SOURCE, (table,)),
                Section("Each suite's analysis", links or "- none: no suite setting has a finished run."),
                Section("Runs", "Every run of the sweep file as last run, with its provenance (git: the code that "
                                "made the run; created: when).",
                        (Table("runs", "Runs and provenance", _provenance(state.runs, dirs, statuses),
                               formats=dict.fromkeys(("run", "model", "model_hash", "revision", "dtype", "mode", "git",
                                                      "created", "status"), "text")),))]
    missing = "\n".join(f"- **{name}**: {s}" for name, s in unfinished.items()) or "- none: every run finished."
    if unfinished and not allow_partial:
        missing += "\n\nPartial runs are left out of the tables above; `--allow-partial` analyzes what they hold."
    sections.append(Section("Partial, failed or not started", missing))
    if refused:
        sections.append(Section("Analyses that refused their runs", "\n".join(
            f"- **{label}**: {reason}" for label, reason in refused.items())))
    notes = ["A headline row is the suite's own number as its analysis prints it; compare models within one suite "
             "and setting (same prompts, same options), never numbers of different suites.",
             "An interval that spans zero (or a suite's null) does not show the absence of an effect; see each "
             "suite's equivalence reading where it has one."]
    return Analysis(f"Sweep {code_span(Path(state.config_file).name)}", f"Sweep file {code_span(state.config_file)} "
                    f"(sha256 {code_span(state.sha256[:12])}…), folder {code_span(str(folder.resolve()))}.", sections,
                    notes)
