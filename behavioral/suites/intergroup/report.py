"""report.md of an analysis: the run's provenance, answer and refusal rates, Tables 2/3/6/7 and links to all outputs."""

from __future__ import annotations

from pathlib import Path

from behavioral.outputs import REPORT, Table
from behavioral.suites.intergroup.result import SettingAnalysis
from behavioral.suites.intergroup.settings import SETTING_NAMES, get_setting, setting_label

NOT_RECORDED = "not recorded"


def _percent_text(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.2f}%"


def _weighted(analyses: list[SettingAnalysis], attr: str) -> float | None:
    """Mean of a per-analysis rate over prompts, pooling categories; None where no analysis measured it."""
    pairs = [(getattr(a, attr), a.n_prompts) for a in analyses if getattr(a, attr) is not None and a.n_prompts]
    total = sum(n for _, n in pairs)
    return sum(v * n for v, n in pairs) / total if total else None


def _run_section(manifest: dict, run_dir: Path, analyses: list[SettingAnalysis]) -> list[str]:
    config, prov = manifest.get("config", {}), manifest.get("provenance", {})
    n_events = {len(a.keep) for a in analyses}
    lines = [
        "## Run",
        "",
        f"- Run directory: `{run_dir}`",
        f"- Model: `{config.get('model', NOT_RECORDED)}` (hash `{config.get('model_hash', NOT_RECORDED)}`)",
        f"- dtype: `{config.get('dtype', NOT_RECORDED)}`; mode: `{config.get('mode', NOT_RECORDED)}`",
        f"- Device: {prov.get('device', NOT_RECORDED)}",
        f"- Corpus hash: `{config.get('corpus_hash', NOT_RECORDED)}`",
        f"- Events: {config.get('n_events', NOT_RECORDED)} planned; "
        f"{', '.join(str(n) for n in sorted(n_events))} in the results",
        f"- Git commit: `{prov.get('git_commit', NOT_RECORDED)}`; created: {prov.get('created', NOT_RECORDED)}",
    ]
    versions = prov.get("package_versions") or {}
    if isinstance(versions, dict):
        versions = [f"{name} {version}" for name, version in sorted(versions.items())]
    lines.append(f"- Package versions: {', '.join(f'`{v}`' for v in versions) or NOT_RECORDED}")
    return lines


# Columns of the rates table: header and the per-analysis rate pooled over prompts.
RATE_COLUMNS = (
    ("Numeric answers", "parsable_rate"),
    ("Cut at the token limit", "truncated_rate"),
    ("Numeric mass", "numeric_mass_mean"),
    ("Numeric mass > 0.5", "numeric_mass_share"),
    ("Refused", "refusal_rate"),
)


def _rates_section(analyses: list[SettingAnalysis]) -> list[str]:
    """Numeric-answer and refusal rates per setting, pooled over categories; unmeasured columns left out."""
    columns = [(h, attr) for h, attr in RATE_COLUMNS if _weighted(analyses, attr) is not None]
    lines = [
        "## Numeric answers and refusals",
        "",
        "Pooled over the categories of each setting. *Numeric answers*: generated responses holding a parsable "
        "number; *cut at the token limit*: generated responses that reached --max-new-tokens before the answer was "
        "decided or the turn ended; *numeric mass*: mean probability that the model's unconstrained first answer token starts a number "
        "(and the share of prompts where it exceeds 0.5); *refused*: prompts with no value of the measure (refused "
        "or no parsable number); *events excluded*: events dropped from every cell because some cell refused them.",
        "",
        "| Setting | Prompts | " + " | ".join(h for h, _ in columns) + " | Events excluded |",
        "|---|---|" + "---|" * len(columns) + "---|",
    ]
    for setting in SETTING_NAMES:
        group = [a for a in analyses if a.setting == setting]
        if not group:
            continue
        excluded = sum(int((~a.keep).sum()) for a in group) / sum(len(a.keep) for a in group)
        cells = [setting_label(setting), str(sum(a.n_prompts for a in group))]
        cells += [_percent_text(_weighted(group, attr)) for _, attr in columns] + [_percent_text(excluded)]
        lines.append("| " + " | ".join(cells) + " |")
    overall = ", ".join(f"{h.lower()} {_percent_text(_weighted(analyses, attr))}" for h, attr in columns)
    lines += ["", f"Over all {sum(a.n_prompts for a in analyses)} prompts: {overall}."]
    return lines


def _scoring_paragraph(analyses: list[SettingAnalysis], mode: str | None, measure: str) -> list[str]:
    """Why intensities come from the distribution over valid answers, with the measured numeric rate."""
    if mode != "score" and measure == "intensity":
        return []
    scales = sorted({get_setting(a.setting).max_rating for a in analyses}, reverse=True)
    valid = " or ".join(f"0..{m}" for m in scales)
    mass, share = _weighted(analyses, "numeric_mass_mean"), _weighted(analyses, "numeric_mass_share")
    text = (
        f"Intensities here come from the model's probability distribution over the valid answers {valid}, read in a "
        "tree-masked forward pass over every valid answer string, not from free generation: `intensity` is the "
        "answer greedy decoding reaches when made to start with a number (the same number plain greedy generation "
        "gives wherever that generation starts with one), `expected_intensity` the mean of the distribution. "
        f"This report uses `{measure}`. "
    )
    if mass is None:
        text += "The run recorded no numeric mass, so how often the model answers with a number is not known."
    else:
        verdict = (
            "mostly does not answer with a number, which is why the scores are read from the distribution"
            if share < 0.5
            else "mostly starts its answer with a number"
        )
        text += (
            f"Under plain greedy decoding this model {verdict}: the probability that its unconstrained first answer "
            f"token starts a number averages {_percent_text(mass)} and exceeds 0.5 for {_percent_text(share)} of prompts."
        )
    return ["", text]


def _method_section(options: dict) -> list[str]:
    """How the statistics were computed where the authors' notebook leaves a choice: exclusion, rounding, t-SNE."""
    digits = options.get("round_cells")
    rounding = (
        f"M⁰ cells are rounded to {digits} decimals before z-scoring, as the authors' notebook does."
        if digits is not None
        else "M⁰ cells are not rounded (the authors' notebook rounds each cell to 2 decimals before z-scoring; "
        "`--round-cells 2` reproduces their printed digits)."
    )
    tsne = options["tsne"]
    params = ", ".join(f"{k}={v}" for k, v in sorted(tsne["params"].items()))
    return [
        "## Method",
        "",
        f"- Exclusion: {options['exclusion']}.",
        f"- Rounding: {rounding}",
        f"- Figure 4 (t-SNE of the perceiver rows of δ's matrix): scikit-learn {tsne['sklearn']}, {params}.",
        f"- Measure: `{options['measure']}`; permutations: {options['n_permutations']} (seed {options['seed']}).",
    ]


def write_report(
    out_dir: Path,
    run_dir: Path,
    manifest: dict,
    analyses: list[SettingAnalysis],
    tables: dict[str, Table],
    figure_paths: list[Path],
    matrix_paths: list[Path],
    options: dict,
) -> Path:
    """Write `out_dir`/report.md from the analyses, the tables and figures already written there and the analysis
    options (measure, n_permutations, seed, round_cells, allow_partial, completeness, exclusion, tsne)."""
    mode = manifest.get("config", {}).get("mode")
    lines = ["# Empathy-gap analysis", ""]
    lines += _run_section(manifest, run_dir, analyses)
    lines += [
        f"- Run: {options['completeness']}; partial results allowed: {'yes' if options['allow_partial'] else 'no'}; "
        f"prompts missing: {sum(a.n_missing for a in analyses)}",
        "",
    ]
    lines += _method_section(options) + [""]
    lines += _rates_section(analyses)
    lines += _scoring_paragraph(analyses, mode, options["measure"])
    notes = [f"- {a.category.title}, {setting_label(a.setting)}: {note}" for a in analyses for note in a.notes]
    if notes:
        lines += ["", "## Statistics not available", ""] + notes
    for table in tables.values():
        lines += [
            "",
            f"## {table.title}",
            "",
            table.markdown.rstrip("\n"),
            "",
            f"Tidy CSV: [{table.csv.name}]({table.csv.name}); Markdown: [{table.md.name}]({table.md.name})",
        ]
    lines += ["", "## Figures", ""]
    pngs = [p for p in figure_paths if p.suffix == ".png"]
    if pngs:
        lines += [f"![{pngs[0].stem}]({pngs[0].relative_to(out_dir)})", ""]
    for png in pngs:
        pdf = png.with_suffix(".pdf")
        lines.append(f"- {png.stem}: [PNG]({png.relative_to(out_dir)}), [PDF]({pdf.relative_to(out_dir)})")
    lines += ["", "## Matrices", "",
              "Per category and setting: perceiver, experiencer, M⁰, M, δ's matrix M_delta, t-test mask.", ""]
    lines += [f"- [{p.name}]({p.relative_to(out_dir)})" for p in matrix_paths]
    path = out_dir / REPORT
    path.write_text("\n".join(lines) + "\n")
    return path
