"""Runs as a tidy per-item dataset to share: one Parquet table per suite, a row per prompt × sample with its run's
labels and provenance, and a Hugging Face dataset card that says where the rows came from, which runs are partial,
and whether the rows may be published at all. `empathy-gap export` writes through it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from scipy import stats

from behavioral.analysis.formats import markdown
from behavioral.analysis.runs import Run, model_name, provenance_fields
from behavioral.manifest import read_manifest
from behavioral.output_folder import OutputFolderError, is_run_directory, output_folder
from behavioral.provenance import git_commit
from behavioral.registry import get_suite
from behavioral.run_reader import read_run

CARD = "README.md"
DATA_DIR = "data"
LABELS = ("model", "setting")  # what a run's labels may name: its name in the tables, and the sweep setting

# (column, Arrow type, what the card says it holds): the suite's item fields (text) come between HEAD and TAIL
HEAD = (
    ("run", pa.string(), "the run's name: its label, else its model as the analyses name it"),
    ("model", pa.string(), "the model as the run recorded it: hub id, local path, or an imported run's name"),
    ("model_hash", pa.string(), "sha256 of the model's weight and config files (empty for a hub id, null where the "
                                "run recorded none)"),
    ("revision", pa.string(), "the hub commit of the model's files (null where unknown)"),
    ("dtype", pa.string(), "the dtype the model ran in"),
    ("suite", pa.string(), "the empathy-gap suite of the run"),
    ("sweep_setting", pa.string(), "the sweep setting the run belongs to (its label; empty outside a sweep)"),
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
    ("probs", pa.list_(pa.float64()), "every label's probability renormalised over the answer set, in its label "
                                      "order (kept for sets of up to 32 labels, or any with --store-probs; else "
                                      "null)"),
)
PANDAS = {pa.string(): "string", pa.bool_(): "boolean", pa.int32(): "int32", pa.float64(): "float64"}

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

    setting: str = ""

    @property
    def suite(self) -> str:
        """The suite of the run."""
        return self.manifest.suite


def source(config: dict) -> Source:
    """The data a run's items came from, as its suite declares it: the suite's shipped data under its licence, or
    data the user gave (a corpus, items, templates, imported results), which no licence lets the rows carry."""
    suite = get_suite(config["suite"])
    given = config.get("imported_from") or suite.user_data(config)
    holds = f"its rows hold {suite.rows_hold}"
    if given:
        replies = "" if config["mode"] == "score" else "; its generated replies (`response`) may quote them"
        imported = "results imported from" if config.get("imported_from") else "data the user gave"
        return Source(f"{imported} (`{given}`), whose texts no licence lets this dataset carry: {holds}{replies}. "
                      "**Do not publish its rows.**", None)
    text, licence = suite.data_licence(config)
    return Source(f"{text}: {holds}", licence)


def _read(run_dir: str | Path, labels: Mapping[str, str] | None) -> Exported:
    """A run directory read for export (a partial one too), named by `labels` or by its model."""
    labels = dict(labels or {})
    unknown = sorted(set(labels) - set(LABELS))
    if unknown:
        raise ValueError(f"{run_dir}: labels name {', '.join(unknown)}; expected only {', '.join(LABELS)}")
    manifest, rows, done = read_run(run_dir, read_manifest(run_dir).suite, allow_partial=True)
    return Exported(labels.get("model") or model_name(manifest.config), Path(run_dir), manifest, rows, done,
                    labels.get("setting", ""))


def _columns(suite: str) -> list[tuple[str, pa.DataType, str]]:
    """The exported columns of `suite`'s table, its item fields between the run's and the answer's."""
    fields = [(f, pa.string(), f"the item's `{f}`, as the {suite} suite stores it (see its README)")
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
    seen: dict[tuple[str, str, str], Path] = {}
    for r in runs:
        key = (r.suite, r.name, r.setting)
        if key in seen:
            setting = f", setting {r.setting!r}" if r.setting else ""
            raise ValueError(f"{r.run_dir}: a second {r.suite} run labelled {r.name!r}{setting} (the first: "
                             f"{seen[key]}); expected one run per label and suite: give labels that tell them apart")
        seen[key] = r.run_dir


def _front_matter(tables: Mapping[str, pa.Table], licences: set[str | None]) -> str:
    """The card's YAML front matter (the free-text name written as JSON, which YAML reads as it is)."""
    licence = licences.pop() if len(licences) == 1 and None not in licences else "other"
    size = next((name for bound, name in SIZES if sum(t.num_rows for t in tables.values()) < bound), "n>10M")
    lines = ["---", f"license: {licence}", f"pretty_name: {json.dumps('empathy-gap runs: ' + ', '.join(tables))}",
             "language:", "- en", "tags:", "- social-bias", "- empathy", "- llm-evaluation", "size_categories:",
             f"- {size}", "configs:"]
    for suite in tables:
        lines += [f"- config_name: {suite}", f"  data_files: {DATA_DIR}/{suite}.parquet"]
    return "\n".join([*lines, "---"]) + "\n"


def _provenance(runs: Sequence[Exported]) -> pd.DataFrame:
    """One row per run: what made it and how much of its plan it holds."""
    frame = pd.DataFrame([{"run": r.name, "sweep_setting": r.setting} | provenance_fields(r.manifest)
                          | {"rows": len(r.rows), "completeness": r.completeness.describe()} for r in runs])
    return frame[["run", "sweep_setting", "model", "model_hash", "revision", "dtype", "mode", "rows", "git_commit",
                  "created", "completeness"]]


def _suite_section(suite: str, runs: Sequence[Exported], table: pa.Table) -> str:
    """The card's section on one suite's table: its size, runs, models, columns, provenance and how to load it."""
    path = f"{DATA_DIR}/{suite}.parquet"
    partial = [r for r in runs if not r.completeness.complete]
    models = {r.manifest.config["model"] for r in runs}
    lines = [f"## `{suite}` (config `{suite}`, `{path}`)", "",
             f"- rows: {table.num_rows:,}", f"- runs: {', '.join(f'`{r.name}`' for r in runs)}",
             f"- models: {', '.join(f'`{model}`' for model in sorted(models))}",
             f"- partial runs: {', '.join(f'`{r.name}` ({r.completeness.describe()})' for r in partial) or 'none'}",
             "", "### Columns", "", "A missing number is null (pandas reads it as NaN).", ""]
    lines += [f"- `{name}` ({kind}): {what}" for name, kind, what in _columns(suite)]
    lines += ["", "### Runs", "", markdown(_provenance(runs)),
              "### Loading", "", "```python", "import pandas as pd", f'rows = pd.read_parquet("{path}")', "",
              "from datasets import load_dataset", f'rows = load_dataset("parquet", data_files="{path}")["train"]',
              "```", ""]
    return "\n".join(lines)


def card(runs: Sequence[Exported], tables: Mapping[str, pa.Table]) -> str:
    """The dataset card (README.md): front matter, the data's sources and licences, then a section per suite."""
    sources = [(r, source(r.manifest.config)) for r in runs]
    barred = [r for r, s in sources if s.licence is None]
    lines = ["# empathy-gap runs", "",
             f"Per-item results of {len(runs)} empathy-gap run{'s' * (len(runs) != 1)}, one row per prompt × sample, "
             f"one table per suite; exported by `empathy-gap export` (commit `{git_commit() or 'unknown'}`). "
             "Partial runs are exported as far as they got and marked below.", "", "## Sources and licences", ""]
    if barred:
        named = ", ".join(f"`{r.name}` ({r.suite})" for r in barred)
        lines += [f"**Do not publish this dataset**: the rows of {named} come from data the user gave, which no "
                  "licence lets them carry.", ""]
    lines += [f"- `{r.name}` ({r.suite}{', ' + r.setting if r.setting else ''}): {s.text}" for r, s in sources]
    lines += ["- The code that made these rows is empathy-gap's (MIT). `response` holds the models' generated text, "
              "under each model's terms of use.", ""]
    sections = [_suite_section(suite, [r for r in runs if r.suite == suite], table) for suite, table in tables.items()]
    return _front_matter(tables, {s.licence for _, s in sources}) + "\n" + "\n".join([*lines, *sections])


def _outside_runs(to: str | Path) -> None:
    """Refuse a dataset folder that is, or is inside, a run directory (whose files only its run writes)."""
    target = Path(to).resolve()
    run_dir = next((p for p in (target, *target.parents) if is_run_directory(p)), None)
    if run_dir is not None:
        inside = "is" if run_dir == target else "is inside"
        raise OutputFolderError(f"--to {to}: {inside} the run directory {run_dir}; expected a folder outside every "
                                "run directory, whose files only its run writes")


def export_runs(runs: Sequence[str | Path], to: str | Path,
                labels: Sequence[Mapping[str, str]] | None = None) -> Path:
    """Export run directories (partial ones too) as a dataset folder `to`, outside every run directory:
    data/<suite>.parquet, a tidy row per prompt × sample, and README.md, a Hugging Face dataset card; `labels` name
    each run (model, setting), else its model names it. Everything is read and checked before anything is written;
    returns the card's path."""
    if not runs:
        raise ValueError("no run directory given; expected at least one")
    _outside_runs(to)
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
