"""`empathy-gap analyze` for jaem: per-sample metrics of one or more runs, Table 1, per-attribute effects,
comparisons, figures, report.md and the analysis manifest."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


from behavioral.outputs import REPORT, staged_dir, write_table
from behavioral.provenance import provenance
from behavioral.store import MANIFEST, read_manifest, read_results, write_json_atomic
from behavioral.suites.jaem import figures, tables
from behavioral.suites.jaem.dimensions import PROJECT_DIMENSIONS, load_dimensions
from behavioral.suites.jaem.era import HFEraScorer, parse_era_models
from behavioral.suites.jaem.errors import JaemInputError
from behavioral.suites.jaem.lexicon import VadLexicon, load_vad_lexicon
from behavioral.suites.jaem.metrics import sample_metrics
from behavioral.suites.jaem.report import markdown, write_report


def _label(model: str, parts: tuple[str, ...], depth: int) -> str:
    """`model`, followed by the last `depth` components of a run directory's path where depth > 0."""
    return f"{model} ({Path(*parts[-depth:]).as_posix()})" if depth else model


def _labels(manifests: list[dict], run_dirs: Sequence[Path]) -> list[str]:
    """A name per run: the model's last path component, followed by as much of the end of the run directory's path
    as tells apart runs whose names or file stems would repeat; runs that nothing tells apart are refused."""
    models = [Path(str(m["config"]["model"])).name for m in manifests]
    paths = [d.resolve().parts for d in run_dirs]
    depths = [0] * len(models)
    while True:
        labels = [_label(m, p, k) for m, p, k in zip(models, paths, depths)]
        stems = [_stem(label) for label in labels]
        clashing = [i for i, s in enumerate(stems) if stems.count(s) > 1]
        if not clashing:
            return labels
        deeper = [i for i in clashing if depths[i] < len(paths[i])]
        if not deeper:
            i, j = clashing[0], stems.index(stems[clashing[0]], clashing[0] + 1)
            raise JaemInputError(f"{run_dirs[i]} and {run_dirs[j]}: runs that cannot be told apart (name "
                                 f"{labels[i]!r}, files *_{stems[i]}.*); expected each run directory once, paths "
                                 "that differ in more than punctuation")
        for i in deeper:
            depths[i] += 1


def analyze(run_dirs: Sequence[str | Path], out: str | Path | None = None, vad_lexicon: str | None = None,
            era_model: str | None = None, era_batch_size: int = 16, era=None) -> Path:
    """Analyze jaem runs into `out` (default: the first run's `analysis/`); `era` an EraScorer object in place of
    `era_model`. Returns report.md's path."""
    run_dirs = [Path(d) for d in run_dirs]
    manifests = [read_manifest(d) for d in run_dirs]
    for d, m in zip(run_dirs, manifests):
        if m["config"].get("suite") != "jaem":
            raise JaemInputError(f"{d}: a run of suite {m['config'].get('suite')!r}; expected jaem")
    lexicon: VadLexicon | None = load_vad_lexicon(vad_lexicon) if vad_lexicon else None
    if era is None and era_model:
        era = HFEraScorer(parse_era_models(era_model), batch_size=era_batch_size)
    final = Path(out) if out else run_dirs[0] / "analysis"
    with staged_dir(final) as out:
        runs = {label: sample_metrics(read_results(d), lexicon, era)
                for label, d in zip(_labels(manifests, run_dirs), run_dirs)}
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
        write_json_atomic(out / MANIFEST, {"runs": [{"run_dir": str(d.resolve()), "config": m["config"]}
                                                    for d, m in zip(run_dirs, manifests)],
                                           "measures": facts, "provenance": provenance()})
        write_report(out, run_dirs, manifests, runs, effects, written, facts)
    return final / REPORT


def _stem(label: str) -> str:
    """The part of a run's file names that stands for its label: `label` with other than letters, digits, -_. as _."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)


def _dimensions(config: dict) -> dict:
    """The attribute values a run was made with (for the order of figure axes)."""
    path = (config.get("options") or {}).get("dimensions")
    return load_dimensions(path) if path and Path(path).is_file() else PROJECT_DIMENSIONS
