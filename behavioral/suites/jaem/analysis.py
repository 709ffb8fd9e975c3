"""`empathy-gap analyze` for jaem: per-sample metrics of one or more runs, Table 1, per-attribute effects,
comparisons, figures, report.md and the analysis manifest."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


from behavioral.output_folder import output_folder
from behavioral.outputs import REPORT, write_table
from behavioral.run_labels import run_labels
from behavioral.run_reader import read_run
from behavioral.suites.jaem import figures, tables
from behavioral.suites.jaem.dimensions import PROJECT_DIMENSIONS, load_dimensions
from behavioral.suites.jaem.era import HFEraScorer, parse_era_models
from behavioral.suites.jaem.lexicon import VadLexicon, load_vad_lexicon
from behavioral.suites.jaem.metrics import sample_metrics
from behavioral.suites.jaem.report import markdown, write_report


def _labels(manifests: list[dict], run_dirs: Sequence[Path]) -> list[str]:
    """A name per run: the model's last path component, with as much of the run directory's path as tells apart
    runs whose names or file stems would repeat (behavioral.run_labels)."""
    return run_labels([Path(str(m["config"]["model"])).name for m in manifests], run_dirs, key=_stem)


def analyze(run_dirs: Sequence[str | Path], out: str | Path | None = None, vad_lexicon: str | None = None,
            era_model: str | None = None, era_batch_size: int = 16, era=None, allow_partial: bool = False) -> Path:
    """Analyze jaem runs into `out` (default: the first run's `analysis/`); `era` an EraScorer object in place of
    `era_model`; a run that has not finished is refused unless `allow_partial`. Returns report.md's path."""
    run_dirs = [Path(d) for d in run_dirs]
    manifests, rows, done = zip(*(read_run(d, "jaem", allow_partial) for d in run_dirs))
    lexicon: VadLexicon | None = load_vad_lexicon(vad_lexicon) if vad_lexicon else None
    if era is None and era_model:
        era = HFEraScorer(parse_era_models(era_model), batch_size=era_batch_size)
    final = Path(out) if out else run_dirs[0] / "analysis"
    record = {"runs": [{"run_dir": str(d.resolve()), "config": m["config"], "completeness": c.describe()}
                       for d, m, c in zip(run_dirs, manifests, done)]}
    with output_folder(final, "analyze jaem", record) as folder:
        out = folder.path
        runs = {label: sample_metrics(r, lexicon, era) for label, r in zip(_labels(manifests, run_dirs), rows)}
        written = [write_table(out, "table1", "Table 1: model × template", t1 := tables.table1(runs),
                               markdown(t1, 3))]
        effects = {}
        for label, metrics in runs.items():
            stem = _stem(label)
            metrics.to_csv(out / f"samples_{stem}.csv", index=False)
            per_value, per_attr = tables.effects(metrics)
            effects[label] = (per_value, per_attr)
            written.append(write_table(out, f"attributes_{stem}", f"Per-attribute effects: {label}", per_value,
                                       markdown(per_value)))
            written.append(write_table(out, f"omnibus_{stem}", f"Omnibus tests per attribute: {label}", per_attr,
                                       markdown(per_attr)))
            config = manifests[list(runs).index(label)]["config"]
            dims = _dimensions(config)
            for metric in tables.available(metrics):
                figures.z_heatmap(per_value, metric, list(dims["sexuality"]), list(dims["pronoun"]), out,
                                  f"z_{metric}_{stem}")
            if metrics["ce_correct"].notna().any():
                figures.choices(metrics, out, f"choices_{stem}")
        compared = tables.comparisons(runs)
        written.append(write_table(out, "comparisons", "Between templates and runs", compared,
                                   markdown(compared)))
        facts = {"vad_lexicon": None if lexicon is None else
                 {"source": lexicon.source, "sha256": lexicon.sha256, "scale": lexicon.scale, "demo": lexicon.demo,
                  "terms": len(lexicon.terms)},
                 "era_model": era_model or (type(era).__name__ if era is not None else None)}
        folder.record["measures"] = facts
        write_report(out, run_dirs, manifests, runs, effects, written, facts, done)
    return final / REPORT


def _stem(label: str) -> str:
    """The part of a run's file names that stands for its label: `label` with other than letters, digits, -_. as _."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)


def _dimensions(config: dict) -> dict:
    """The attribute values a run was made with (for the order of figure axes)."""
    path = (config.get("options") or {}).get("dimensions")
    return load_dimensions(path) if path and Path(path).is_file() else PROJECT_DIMENSIONS
