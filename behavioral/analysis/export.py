"""Runs as a tidy per-item dataset to share: one Parquet table per suite, a row per prompt × sample with its run's
labels and provenance, and a Hugging Face dataset card that says where the rows came from, which runs are partial,
whether the rows may be published at all, and per suite what a row and each column is, the label order of `probs`,
and each run's decoding settings, options and prompt templates (in its text and, for programs, its front matter).
Everything a manifest holds enters the card as data: YAML quoted by its dumper, Markdown code spans and fences.
`empathy-gap export` writes through it."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from scipy import stats

from behavioral.analysis.outside_runs import check_outside_runs
from behavioral.analysis.report import code_span
from behavioral.analysis.runs import Run, model_name, provenance_fields
from behavioral.rundir.manifest import MANIFEST, options_of, read_manifest
from behavioral.analysis.output_folder import output_folder
from behavioral.rundir.provenance import git_commit
from behavioral.suite.registry import get_suite
from behavioral.runner.run import STORE_PROBS_UP_TO
from behavioral.runner.reader import read_run
from behavioral.sweep.config import setting_label

if TYPE_CHECKING:
    from behavioral.suite.card import LabelSet

CARD = "README.md"
DATA_DIR = "data"
LABELS = ("model", "setting")  # what a run's labels may name: its name in the tables, and the sweep setting
META = "empathy_gap"  # the front matter's key for what the card says of each config
ROW = "one prompt × sample of a run"  # a row of a suite that declares no more (Suite.card)
NOT_SHIPPED = "Not the suite's own text (the user's files or the authors' release): not in this card."
# the run settings that decided how replies were decoded or scored (manifest config keys), as the card lists them
DECODING = ("mode", "temperature", "top_p", "samples", "max_new_tokens", "seed", "prompt_format", "store_probs")
CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")  # what YAML writes only inside double quotes

# (column, Arrow type, what the card says it holds): the suite's item fields (text) come between HEAD and TAIL
HEAD = (
    ("run", pa.string(), "the run's name: its label, else its model as the analyses name it"),
    ("model", pa.string(), "the model as the run recorded it: hub id, local path, or an imported run's name"),
    ("model_hash", pa.string(), "sha256 of the model's weight and config files (empty for a hub id, null where the "
                                "run recorded none)"),
    ("revision", pa.string(), "the hub commit of the model's files (null where unknown)"),
    ("dtype", pa.string(), "the dtype the model ran in"),
    ("suite", pa.string(), "the empathy-gap suite of the run"),
    ("sweep_setting", pa.string(), "the sweep's suite setting the run belongs to, as its analysis names it: suite, "
                                   "or suite--setting where the sweep names settings (null outside a sweep)"),
    ("mode", pa.string(), "what the run stored per item: generate (a parsed reply), score (the distribution over "
                          "the answer set) or both"),
    ("item_id", pa.string(), "the item (prompt) id, unique within a run and sample"),
    ("sample", pa.int32(), "the sample of the item, 0.. (0 alone unless the run sampled several replies)"),
)
TAIL = (
    ("answer", pa.string(), "the parsed reply's answer label; in score mode the label greedy decoding reaches inside "
                            "the answer set; null when refused"),
    ("value", pa.float64(), "the answer's value where answers have values (null otherwise)"),
    ("refused", pa.bool_(), "the reply gave no valid answer (always false in score mode)"),
    ("truncated", pa.bool_(), "the reply reached the token limit undecided (null in score mode or where unknown)"),
    ("response", pa.string(), "the generated reply (null in score mode)"),
    ("score_answer", pa.string(), "scored runs: the label greedy decoding reaches inside the answer set"),
    ("score_value", pa.float64(), "its value (null where unscored or without values)"),
    ("expected", pa.float64(), "scored runs: the mean value under the distribution over the answer set (null "
                               "otherwise)"),
    ("valid_mass", pa.float64(), "scored runs: the probability the answer set holds, before renormalising"),
    ("start_mass", pa.float64(), "scored runs: the probability that the first answer token begins an answer of the "
                                 "set"),
    ("entropy", pa.float64(), "entropy of `probs` in nats (null where the run kept no probs)"),
    ("top_prob", pa.float64(), "the most probable label's probability in `probs` (null where none were kept)"),
    ("probs", pa.list_(pa.float64()), "every label's probability renormalised over the answer set, in the label "
                                      "order the card gives for the row (kept for sets of up to 32 labels, or any "
                                      "with --store-probs; else null)"),
    ("tree_nodes", pa.int32(), "scored runs: the answer tree's nodes read (all of them with --answer-tree full; null "
                               "in runs made before lazy reads)"),
    ("expected_bound", pa.float64(), "scored runs: `expected` lies within this of the full tree's (0 when read in "
                                     "full)"),
    ("probs_bound", pa.float64(), "scored runs: each probability, their total variation distance and valid_mass lie "
                                  "within this of the full tree's"),
    ("entropy_bound", pa.float64(), "scored runs: `entropy` lies within this (nats) of the full tree's"),
)
PANDAS = {pa.string(): "string", pa.bool_(): "boolean", pa.int32(): "Int32", pa.float64(): "float64"}

SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
         (10_000_000, "1M<n<10M"))


@dataclass(frozen=True)
class Source:
    """Where a run's item texts came from, as the card says it, and the licence its rows may be shared under (a
    Hugging Face licence id; None: they must not be published)."""

    text: str
    licence: str | None


@dataclass(frozen=True, eq=False)
class Exported(Run):
    """One run read for export: a Run whose rows are as stored (no suite's view), and its sweep setting label."""

    setting: str | None = None

    @property
    def suite(self) -> str:
        """The suite of the run."""
        return self.manifest.suite

    @property
    def suite_options(self) -> Any:
        """The suite's options of the run as the suite reads them (its defaults where the manifest records none)."""
        cls = get_suite(self.suite).Options
        recorded = options_of(self.manifest, cls, self.run_dir / MANIFEST)
        return cls() if recorded is None and cls is not None else recorded

    @property
    def decoding(self) -> dict[str, Any]:
        """The run's decoding settings (DECODING) as its manifest records them."""
        return {k: self.config[k] for k in DECODING if k in self.config}


class _Dumper(yaml.SafeDumper):
    """YAML that writes a string holding a line break or other control character double-quoted on one line."""


_Dumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style='"' if CONTROL.search(text) else None))


def source(config: dict) -> Source:
    """The data a run's items came from, as its suite declares it: the suite's shipped data under its licence, or
    data the user gave (a corpus, items, templates, imported results), which no licence lets the rows carry."""
    suite = get_suite(config["suite"])
    given = config.get("imported_from") or suite.user_data(config)
    holds = f"its rows hold {suite.rows_hold}"
    if given:
        replies = "" if config["mode"] == "score" else "; its generated replies (`response`) may quote them"
        imported = "results imported from" if config.get("imported_from") else "data the user gave"
        return Source(f"{imported} ({code_span(given)}), whose texts no licence lets this dataset carry: {holds}"
                      f"{replies}. **Do not publish its rows.**", None)
    text, licence = suite.data_licence(config)
    return Source(f"{text}: {holds}", licence)


def _read(run_dir: str | Path, labels: Mapping[str, str] | None) -> Exported:
    """A run directory read for export (a partial one too), named by `labels` or by its model; a `setting` label
    (a sweep's) makes its sweep setting the sweep's label of the run's suite setting."""
    labels = dict(labels or {})
    unknown = sorted(set(labels) - set(LABELS))
    if unknown:
        raise ValueError(f"{run_dir}: labels name {', '.join(unknown)}; expected only {', '.join(LABELS)}")
    manifest, rows, done = read_run(run_dir, read_manifest(run_dir).suite, allow_partial=True)
    setting = setting_label(manifest.suite, labels["setting"]) if "setting" in labels else None
    return Exported(labels.get("model") or model_name(manifest.config), Path(run_dir), manifest, rows, done, setting)


def _columns(suite: str) -> list[tuple[str, pa.DataType, str]]:
    """The exported columns of `suite`'s table, its item fields between the run's and the answer's."""
    declared = get_suite(suite).card
    fields = [(f, pa.string(), declared.fields[f] if declared else f"the item's `{f}`, as the {suite} suite stores "
                                                                  "it (see its README)")
              for f in get_suite(suite).fields]
    return [*HEAD, *fields, *TAIL]


def _table(runs: Sequence[Exported]) -> pa.Table:
    """The runs' rows (of one suite) as one tidy table: one row per result row, in the order given."""
    columns = _columns(runs[0].suite)
    frames = []
    for r in runs:
        config = r.manifest.config
        entropy = [np.nan if p is None else float(stats.entropy(p)) for p in r.rows["probs"]]
        top = [np.nan if p is None else float(np.max(p)) for p in r.rows["probs"]]
        frames.append(r.rows.assign(
            run=r.name, model=config["model"], model_hash=config.get("model_hash"), revision=config.get("revision"),
            dtype=config.get("dtype"), suite=r.suite, sweep_setting=r.setting, mode=r.manifest.mode,
            entropy=entropy, top_prob=top))
    rows = pd.concat(frames, ignore_index=True)
    frame = pd.DataFrame({name: rows[name].astype(PANDAS[kind]) if kind in PANDAS else rows[name]
                          for name, kind, _ in columns})
    return pa.Table.from_pandas(frame, pa.schema([(name, kind) for name, kind, _ in columns]), preserve_index=False)


def _check(runs: Sequence[Exported]) -> None:
    """Refuse two runs of one suite under one label (their rows could not be told apart)."""
    seen: dict[tuple[str, str, str | None], Path] = {}
    for r in runs:
        key = (r.suite, r.name, r.setting)
        if key in seen:
            setting = f", setting {r.setting!r}" if r.setting else ""
            raise ValueError(f"{r.run_dir}: a second {r.suite} run labelled {r.name!r}{setting} (the first: "
                             f"{seen[key]}); expected one run per label and suite: give labels that tell them apart")
        seen[key] = r.run_dir


def _label_sets(suite: str, runs: Sequence[Exported]) -> list[LabelSet] | None:
    """The label orders of `probs` on the runs' rows, each once; None where the suite declares none."""
    declared = get_suite(suite).card
    if declared is None:
        return None
    return list(dict.fromkeys(s for r in runs for s in declared.labels(r.suite_options)))


def _templates(run: Exported) -> dict[str, str | None] | None:
    """The run's prompt templates by name; None where its suite declares none or it imported its results."""
    declared = get_suite(run.suite).card
    if declared is None or run.config.get("imported_from"):
        return None
    return declared.templates(run.suite_options, run.config)


def _run_meta(run: Exported) -> dict[str, Any]:
    """What the front matter says of a run: its names, decoding settings, options as recorded and templates."""
    return {"run": run.name, "sweep_setting": run.setting, "model": run.config["model"],
            "decoding": run.decoding, "options": run.config.get("options"), "templates": _templates(run)}


def _suite_meta(suite: str, runs: Sequence[Exported]) -> dict[str, Any]:
    """What the front matter says of a config: a row, its columns, the label orders of `probs` and its runs."""
    declared, sets = get_suite(suite).card, _label_sets(suite, runs)
    return {"row": declared.row if declared else ROW,
            "columns": {name: what for name, _, what in _columns(suite)},
            "probs_labels": None if sets is None else [{"rows": dict(s.rows), "labels": list(s.labels)}
                                                       | ({"values": dict(zip(s.labels, s.values))} if s.values else {})
                                                       for s in sets],
            "placeholders": dict(declared.placeholders) if declared else {},
            "runs": [_run_meta(r) for r in runs]}


def _front_matter(runs: Sequence[Exported], tables: Mapping[str, pa.Table], licences: set[str | None]) -> str:
    """The card's YAML front matter: the Hub's fields, then under META what the card says of each config."""
    licence = licences.pop() if len(licences) == 1 and None not in licences else "other"
    size = next((name for bound, name in SIZES if sum(t.num_rows for t in tables.values()) < bound), "n>10M")
    meta = {"license": licence, "pretty_name": f"empathy-gap runs: {', '.join(tables)}", "language": ["en"],
            "tags": ["social-bias", "empathy", "llm-evaluation"], "size_categories": [size],
            "configs": [{"config_name": s, "data_files": f"{DATA_DIR}/{s}.parquet"} for s in tables],
            META: {s: _suite_meta(s, [r for r in runs if r.suite == s]) for s in tables}}
    text = yaml.dump(meta, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=math.inf)
    return f"---\n{text}---\n"


def _named(run: Exported) -> str:
    """A run as the card's text names it: its name, and its sweep setting where it has one."""
    return code_span(run.name) + (f" ({code_span(run.setting)})" if run.setting else "")


def _pairs(values: Mapping[str, Any]) -> str:
    """Recorded settings as the card's text writes them: each name and its JSON value in code spans."""
    return ", ".join(f"{code_span(k)} {code_span(json.dumps(v))}" for k, v in values.items()) or "none"


def _fenced(text: str) -> str:
    """`text` as a fenced code block that no line of it closes, control characters but line breaks and tabs \\xNN."""
    text = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", lambda m: f"\\x{ord(m[0]):02x}", text)
    fence = "`" * max(3, max(map(len, re.findall("`+", text)), default=0) + 1)
    return f"{fence}text\n{text}\n{fence}"


def _label_line(labels: LabelSet) -> str:
    """One label order of `probs` as the card's bullet: the rows it is the order of, its labels and their count."""
    rows = " and ".join(f"`{field}` is {code_span(value)}" for field, value in labels.rows)
    kept = "" if len(labels.labels) <= STORE_PROBS_UP_TO else "; `probs` null unless the run used --store-probs"
    values = ", ".join(f"{label} = {value:g}" for label, value in zip(labels.labels, labels.values))
    valued = f"; as values (`value`, `score_value`, `expected`): {values}" if values else ""
    return (f"- {f'rows whose {rows}' if rows else 'every row'}: {code_span(json.dumps(list(labels.labels)))} "
            f"({len(labels.labels)} labels{kept}{valued})")


def _label_lines(suite: str, runs: Sequence[Exported]) -> list[str]:
    """The card's label orders of `probs` on a table's rows."""
    sets = _label_sets(suite, runs)
    if sets is None:
        return [f"The {suite} suite declares no label order: `probs` follows its answer sets' own."]
    return [_label_line(s) for s in sets] or ["No run of this table scores an answer set: `probs` is null."]


def _run_lines(run: Exported) -> list[str]:
    """The card's bullets on a run: what made it, its decoding settings, options, templates and rows."""
    made, templates = provenance_fields(run.manifest), _templates(run)
    return [f"#### {_named(run)}", "",
            f"- model: {code_span(made['model'])}; {_pairs({k: made[k] for k in ('model_hash', 'revision', 'dtype')})}",
            f"- decoding: {_pairs(run.decoding)}",
            f"- options: {_pairs(run.config.get('options') or {})}",
            f"- prompt templates: {', '.join(map(code_span, templates)) if templates else 'not declared'}",
            f"- made by: {_pairs({k: made[k] for k in ('git_commit', 'created')})}",
            f"- rows: {len(run.rows):,}; {run.completeness.describe()}", ""]


def _template_lines(runs: Sequence[Exported]) -> list[str]:
    """The card's prompt templates of a table's runs: each distinct (name, text) once, with the runs that used it."""
    used: dict[tuple[str, str | None], list[str]] = {}
    for r in runs:
        for name, text in (_templates(r) or {}).items():
            used.setdefault((name, text), []).append(_named(r))
    lines = ["### Prompt templates", "", "As the suite writes them: each item fills the placeholders (in braces, or "
             "brackets where the source writes them so) from its fields and data." if used else
             "None declared (the suite declares none, or the runs imported their results).", ""]
    declared = get_suite(runs[0].suite).card
    if used and declared and declared.placeholders:
        lines += ["Placeholders that no item field names:", "",
                  *(f"- {code_span(name)}: {what}" for name, what in declared.placeholders.items()), ""]
    for (name, text), named in used.items():
        lines += [f"#### {code_span(name)}: {', '.join(dict.fromkeys(named))}", "",
                  NOT_SHIPPED if text is None else _fenced(text), ""]
    return lines


def _loading_lines(suite: str) -> list[str]:
    """The card's code that loads one config, run inside the dataset's folder."""
    path = f"{DATA_DIR}/{suite}.parquet"
    return ["### Loading", "", "Inside this folder (on the Hub, give its id in place of `os.getcwd()`; `datasets` "
            'refuses `"."` itself: "dataset_name should be specified"):', "", "```python", "import os", "",
            "import pandas as pd", "from datasets import load_dataset", "", f'rows = pd.read_parquet("{path}")',
            f'rows = load_dataset(os.getcwd(), "{suite}", split="train")', "```", ""]


def _suite_section(suite: str, runs: Sequence[Exported], table: pa.Table) -> str:
    """The card's section on one suite's table: a row, size, runs, columns, labels of `probs`, each run's settings,
    the prompt templates and how to load it."""
    path = f"{DATA_DIR}/{suite}.parquet"
    partial = [r for r in runs if not r.completeness.complete]
    declared = get_suite(suite).card
    models = {r.manifest.config["model"] for r in runs}
    lines = [f"## `{suite}` (config `{suite}`, `{path}`)", "", f"A row is {declared.row if declared else ROW}.", "",
             f"- rows: {table.num_rows:,}", f"- runs: {', '.join(map(_named, runs))}",
             f"- models: {', '.join(map(code_span, sorted(models)))}",
             f"- partial runs: {'; '.join(f'{_named(r)}: {r.completeness.describe()}' for r in partial) or 'none'}",
             "", "### Columns", "", "A missing number is null (pandas reads it as NaN).", ""]
    lines += [f"- `{name}` ({kind}): {what}" for name, kind, what in _columns(suite)]
    lines += ["", "### Labels of `probs`", "", *_label_lines(suite, runs), "", "### Runs", ""]
    lines += [line for r in runs for line in _run_lines(r)]
    return "\n".join([*lines, *_template_lines(runs), *_loading_lines(suite)])


def card(runs: Sequence[Exported], tables: Mapping[str, pa.Table]) -> str:
    """The dataset card (README.md): front matter, the data's sources and licences, then a section per suite."""
    sources = [(r, source(r.manifest.config)) for r in runs]
    barred = [r for r, s in sources if s.licence is None]
    lines = ["# empathy-gap runs", "",
             f"Per-item results of {len(runs)} empathy-gap run{'s' * (len(runs) != 1)}, one row per prompt × sample, "
             f"one table (config) per suite; exported by `empathy-gap export` (commit `{git_commit() or 'unknown'}`). "
             "Partial runs are exported as far as they got and marked below. Each suite's section says what a row "
             "is, what each column holds, the label order of `probs`, and each run's decoding settings, options and "
             f"prompt templates; the front matter holds the same under `{META}`.", "", "## Sources and licences", ""]
    if barred:
        named = ", ".join(f"{_named(r)} ({r.suite})" for r in barred)
        lines += [f"**Do not publish this dataset**: the rows of {named} come from data the user gave, which no "
                  "licence lets them carry.", ""]
    lines += [f"- {_named(r)} ({r.suite}): {s.text}" for r, s in sources]
    lines += ["- The code that made these rows is empathy-gap's (MIT). `response` holds the models' generated text, "
              "under each model's terms of use.", ""]
    sections = [_suite_section(suite, [r for r in runs if r.suite == suite], table) for suite, table in tables.items()]
    return _front_matter(runs, tables, {s.licence for _, s in sources}) + "\n" + "\n".join([*lines, *sections])


def export_runs(runs: Sequence[str | Path], to: str | Path,
                labels: Sequence[Mapping[str, str]] | None = None) -> Path:
    """Export run directories (partial ones too) as a dataset folder `to`, outside every run directory:
    data/<suite>.parquet, a tidy row per prompt × sample, and README.md, a Hugging Face dataset card; `labels` name
    each run (model, setting), else its model names it. Everything is read and checked before anything is written;
    returns the card's path."""
    if not runs:
        raise ValueError("no run directory given; expected at least one")
    check_outside_runs(to, "--to", allowed=())  # a dataset is none of a run's own outputs
    if labels is not None and len(labels) != len(runs):
        raise ValueError(f"{len(labels)} labels for {len(runs)} runs; expected one label per run, in their order")
    read = [_read(d, label) for d, label in zip(runs, labels or [None] * len(runs))]
    _check(read)
    suites = list(dict.fromkeys(r.suite for r in read))
    tables = {s: _table([r for r in read if r.suite == s]) for s in suites}
    text = card(read, tables)
    record = {"runs": [{"run": r.name, "sweep_setting": r.setting, "suite": r.suite,
                        "run_dir": str(r.run_dir.resolve()), "run_id": r.manifest.run_id, "rows": len(r.rows),
                        "completeness": r.completeness.describe()} for r in read],
              "rows": {s: t.num_rows for s, t in tables.items()}}
    with output_folder(to, "export", record, flag="--to") as staged:
        (staged.path / DATA_DIR).mkdir()
        for suite, table in tables.items():
            pq.write_table(table, staged.path / DATA_DIR / f"{suite}.parquet")
        (staged.path / CARD).write_text(text)
    return Path(to) / CARD
