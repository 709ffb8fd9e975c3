"""A sweep's analysis: each suite setting's cross-model analysis (the suite's own, through the framework) in a
sub-folder, and one top page: per model and suite the headline numbers with their intervals and sample sizes, the
runs' provenance, and what is partial, failed or not started."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from behavioral.report.formats import code_span, literal
from behavioral.analysis.outside_runs import check_outside_runs
from behavioral.analysis.report import REPORT
from behavioral.analysis.runs import Run, provenance_fields
from behavioral.report.blocks import Analysis, Section, Table
from behavioral.analysis.write import suite_analysis, write
from behavioral.core.files import write_json_atomic
from behavioral.rundir.manifest import MANIFEST, read_manifest
from behavioral.rundir.provenance import provenance
from behavioral.suite.registry import get_suite
from behavioral.analysis.output_folder import output_folder
from behavioral.runner.config import RunConfig
from behavioral.sweep.analysis_table import analysis_options, checked
from behavioral.sweep.folder import ANALYSIS_DIR, SWEEP_FILE, RunRecord, SweepState, progress, read_state, slot

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


def analyze_sweep(folder: str | Path, out: str | Path | None = None, allow_partial: bool = False,
                  options: Mapping[str, Mapping[str, Any]] | None = None) -> Path:
    """Analyze a sweep folder into `out` (default SWEEP/analysis) and return the top page's report.md: each suite
    setting's runs analyzed together (named by their models; with `allow_partial`, partial runs too) with the
    analysis options its table in the sweep file gave, each key replaced by `options` (suite -> values, as an
    analysis table: `{"intergroup": {"measure": "expected_intensity"}}`, for every setting of that suite), the top
    page built from the headline table each suite declares. Only runs inside the folder whose manifests agree with
    their place are read (see slot); a suite setting none of whose runs can be read is listed, not fatal; every
    number is computed before anything is written."""
    folder = Path(folder)
    if out is not None:  # the default is the sweep's own analysis/
        check_outside_runs(out)
    state = read_state(folder)
    chosen = _analysis_options(folder, state, options or {})
    dirs = {r.name: slot(folder, r, state.finished.get(r.name)) for r in state.runs}
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
            analysis, runs, settings, record = suite_analysis([dirs[r.name] for r in ready], chosen[label],
                                                              [r.model for r in ready], allow_partial)
        except ValueError as err:  # e.g. a model that never answers: the suite says so, the other suites go on
            refused[label] = str(err)
            continue
        analyses[label] = (analysis, runs, settings)
        records[label] = record
        headlines += _headlines(analysis, ready, runs)
    top = _top_page(state, statuses, dirs, headlines, list(analyses), refused, folder, allow_partial)
    final = Path(out) if out is not None else folder / ANALYSIS_DIR
    record = {"sweep": str(folder.resolve()), "config_sha256": state.sha256, "allow_partial": allow_partial,
              "analyses": records, "statuses": statuses, "refused": refused}
    with output_folder(final, "analyze sweep", record, within=None if out is not None else folder) as staged:
        for label, (analysis, runs, settings) in analyses.items():
            write(analysis, runs, settings, staged.sub(label))
            write_json_atomic(staged.sub(label) / MANIFEST, {"provenance": provenance()} | records[label])
        write(top, [], {"allow_partial": allow_partial}, staged.path)
    return final / REPORT


def _analysis_options(folder: Path, state: SweepState, given: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Each suite setting's AnalyzeOptions: what sweep.json records for it (checked as the sweep file's table was),
    each key replaced by the command's own `given` values for its suite."""
    suites = {r.suite for r in state.runs}
    unknown = sorted(set(given) - suites)
    if unknown:
        raise ValueError(f"options: {', '.join(unknown)} has no run in sweep {folder}; expected some of "
                         f"{', '.join(sorted(suites))}")
    own = {suite: checked(suite, values, f"options[{suite!r}]", named=True) for suite, values in given.items()}
    chosen = {}
    for i, r in enumerate(state.runs):
        if r.label not in chosen:
            where = f"{folder / SWEEP_FILE}: runs[{i}].analysis"
            chosen[r.label] = analysis_options(r.suite, checked(r.suite, r.analysis, where), own.get(r.suite, {}),
                                               f"the analysis of {r.label}")
    return chosen


# The run settings a setting cell names where they differ from the suite's defaults (the manifest's config keys):
# what decides a run's numbers besides its suite options. The mode is always named.
SETTINGS = ("seed", "temperature", "top_p", "samples", "max_new_tokens", "prompt_format", "answer_tree",
            "tree_tolerance")


def setting_text(record: RunRecord, config: Mapping[str, Any]) -> str:
    """A run's suite setting as a reader needs it: its name where the sweep names one, then its mode, every run
    setting (its manifest's `config`) and suite option that differs from the suite's default, and the analysis
    options its sweep file gave, so that two settings never read the same."""
    run = _differing(config, _default_settings(record.suite, config), SETTINGS)
    declared = get_suite(record.suite).Options
    defaults = json.loads(json.dumps(dataclasses.asdict(declared()))) if declared is not None else {}  # as recorded
    options = _differing(record.options or {}, defaults, record.options or {})
    analysis = [f"analysis {item}" for item in _differing(record.analysis, {}, record.analysis)]
    return ": ".join(filter(None, (record.setting, ", ".join([f"mode {config.get('mode')}", *run, *options,
                                                               *analysis]))))


def _default_settings(suite: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The run settings a run of `suite` takes where none is given; its samples those of its own mode and
    temperature (RunConfig takes the suite's samples only where replies are sampled)."""
    plain = dataclasses.asdict(RunConfig(suite=suite, model=""))
    try:
        own = RunConfig(suite=suite, model="", mode=config.get("mode"), temperature=config.get("temperature"))
    except (TypeError, ValueError):  # a manifest's values are not trusted to build a RunConfig
        return plain
    return plain | {"samples": own.samples}


def _differing(values: Mapping[str, Any], defaults: Mapping[str, Any], keys) -> list[str]:
    """"key value" for each of `keys` that `values` holds with another value than `defaults` (or none)."""
    return [f"{key} {_value_text(values[key])}" for key in keys
            if key in values and values[key] is not None and (key not in defaults or defaults[key] != values[key])]


def _value_text(value) -> str:
    """An option's value in a table cell: a list as its items, anything else as written."""
    return " ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _headlines(analysis: Analysis, records: Sequence[RunRecord], runs: Sequence[Run]) -> list[dict]:
    """The rows of a suite analysis' headline table, keyed by model, suite and setting (`runs`: the runs it read,
    named by their models)."""
    table = next((t for t in analysis.tables() if t.name == HEADLINE), None)
    if table is None:
        return []
    by_model = {r.model: r for r in records}
    configs = {run.name: run.config for run in runs}
    return [{"model": row["run"], "suite": by_model[row["run"]].suite,
             "setting": setting_text(by_model[row["run"]], configs[row["run"]]),
             **{c: row[c] for c in HEADLINE_COLUMNS[3:]}}
            for row in table.frame.to_dict("records")]


def _top_page(state: SweepState, statuses: dict[str, str], dirs: dict[str, Path], headlines: list[dict],
              labels: list[str], refused: dict[str, str], folder: Path, allow_partial: bool) -> Analysis:
    """The sweep's top page: headline numbers, links to each suite setting's analysis, the runs' provenance, what is
    not finished and which suites' analyses refused their runs."""
    frame = pd.DataFrame(headlines, columns=HEADLINE_COLUMNS)
    text = {c: "text" for c in ("model", "suite", "setting", "measure", "interval", "n_unit", "warning", "note")}
    table = Table(HEADLINE, "Headline numbers per model and suite", frame, formats=text | {"n": "count"},
                  definitions={"setting": "the sweep's name for the suite setting, then the run's mode, the run "
                                          "settings and suite options that differ from the suite's defaults and "
                                          "the analysis options the sweep file gives.",
                               "value, low, high": "the suite's headline number and its interval over n sampled "
                                                   "units (what it is over in `interval`); each suite's analysis "
                                                   "says how it is computed.",
                               "warning": "what about the run makes the number doubtful (low answer mass, one "
                                          "answer for almost every item, few parsable replies, refusals, a partial "
                                          "run); its suite's page gives the counts.",
                               "note": "what the number cannot show."})
    unfinished = {name: s for name, s in statuses.items() if s != "finished"}
    links = "\n".join(f"- [{literal(label)}]({label}/report.html) ([Markdown]({label}/report.md))" for label in labels)
    sections = [Section("Headline numbers", SOURCE, (table,)),
                Section("Each suite's analysis", links or "- none: no suite setting has a finished run."),
                Section("Runs", "Every run of the sweep file as last run, with its provenance (git: the code that "
                                "made the run; created: when).",
                        (Table("runs", "Runs and provenance", _provenance(state.runs, dirs, statuses),
                               formats=dict.fromkeys(("run", "model", "model_hash", "revision", "dtype", "mode", "git",
                                                      "created", "status"), "text")),))]
    missing = "\n".join(f"- **{literal(name)}**: {literal(s)}" for name, s in unfinished.items()) or \
        "- none: every run finished."
    if unfinished and not allow_partial:
        missing += "\n\nPartial runs are left out of the tables above; `--allow-partial` analyzes what they hold."
    sections.append(Section("Partial, failed or not started", missing))
    if refused:
        sections.append(Section("Analyses that refused their runs", "\n".join(
            f"- **{literal(label)}**: {literal(reason)}" for label, reason in refused.items())))
    notes = ["A headline row is the suite's own number as its analysis prints it; compare models within one suite "
             "and setting (same prompts, same options), never numbers of different suites.",
             "An interval that spans zero (or a suite's null) does not show the absence of an effect; see each "
             "suite's equivalence reading where it has one."]
    return Analysis(f"Sweep {code_span(Path(state.config_file).name)}", f"Sweep file {code_span(state.config_file)} "
                    f"(sha256 {code_span(state.sha256[:12])}…), folder {code_span(str(folder.resolve()))}.", sections,
                    notes)
