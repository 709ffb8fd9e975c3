"""Identity embeddings, cultural clusters and representational similarity with behavior, for one model.

From a run with persona capture (given with --run, or made here with --model into OUT/run), writes:

- t-SNE and UMAP projections of the persona vectors at a few layers (--layers; default first, middle and last
  block) and of the behavioral rows of M (the paper's Figure 4), coloured by Inglehart-Welzel zone (race: by group),
  singly and as one grid, plus their coordinates (tables/projections.csv);
- cluster statistics against the zones per layer (silhouette, leave-one-out kNN accuracy, label-permutation
  p-values): tables/cluster_stats_<span>.csv and a figure, with the same statistics of the rows of M;
- RSA per layer between persona distances and behavior distances (Spearman r, Mantel p) and the partial Mantel test
  with the identities' token counts partialled out (longer names such as "the United States" can drive both
  distances): tables/rsa_<span>.csv, tables/token_counts_<span>.csv and a figure;
- manifest.json: the run's manifest, this script's arguments, the activation store's meta and provenance.

With --model the suite run comes first: its defaults (score mode, 1 event per cell) are a first look in minutes,
and the run times one batch and prints its estimate before it starts, then shows a progress bar. Every path written
is printed; a failure prints one message and exits non-zero.

    python experiments/nationality_clusters.py --run runs/llama8b --out out/clusters
    python experiments/nationality_clusters.py --model smollm2-135m --setting P0S1T0 --limit-events 4 --out out/c
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from activations import store as activation_store
from activations.capture import hook_layer, select_hooks
from activations.spans import prompt_spans
from behavioral import models
from behavioral import store as run_store
from behavioral.chat import detect_format
from behavioral.outputs import save_figure
from behavioral.output_folder import OutputFolder, output_folder
from behavioral.suites.intergroup.analysis import load_analyses
from behavioral.suites.intergroup.suite import AnalyzeOptions
from behavioral.suites.intergroup import prompts
from behavioral.suites.intergroup.groups import CATEGORIES, UNSPECIFIED, get_category
from behavioral.suites.intergroup.settings import SETTING_NAMES, get_setting, setting_label
from interp import clusters, rsa
from interp.progress import estimate_run

COMMAND = "study nationality_clusters"
RUN_DIR = "run"  # the suite run --model makes inside --out, kept and resumed across reruns
SPANS = ("persona", "experiencer")
MODEL_EVENTS = 1  # events per cell of the --model run by default: 484 prompts for nationality
METHOD_TITLES = {"tsne": "t-SNE", "umap": "UMAP"}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", type=Path, help="an existing run directory with persona capture")
    source.add_argument("--model", help="run this model first (score mode, persona capture) into OUT/run")
    p.add_argument("--out", type=Path, required=True,
                   help="output folder: new, empty, or an earlier output of this study (whose files are replaced)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="let the model folder run its own code (never taken from a run's manifest)")
    p.add_argument("--category", default="nationality", choices=tuple(CATEGORIES))
    p.add_argument("--setting", help="prompt setting (default: P0S0T0 with --model; the run's first with --run)")
    p.add_argument("--limit-events", type=int, help="with --model: seeded sample of N events per setting "
                                                    f"(default {MODEL_EVENTS})")
    p.add_argument("--events", help="with --model: crowd-enVENT release (default: the embedded events)")
    p.add_argument("--mode", default="score", choices=("generate", "score", "both"), help="with --model")
    p.add_argument("--device", default="auto", help="with --model")
    p.add_argument("--dtype", default="auto", help="with --model")
    p.add_argument("--batch-size", type=int, default=16, help="with --model")
    p.add_argument("--capture-layers", default="all", help="with --model: layers to capture (all or 0,4,8)")
    p.add_argument("--span", default="persona",
                   help="identity vectors to analyse: persona, experiencer (as seen by 'a person') or both")
    p.add_argument("--reduction", default="mean", choices=activation_store.REDUCTIONS,
                   help="vector of a multi-token span: mean over its tokens or its last token")
    p.add_argument("--layers", default="first,middle,last",
                   help="layers to project: comma list of first, middle, last, embed or block numbers (-1: last)")
    p.add_argument("--metric", default="cosine", choices=clusters.METRICS,
                   help="distance between identity vectors (centred over identities per layer)")
    p.add_argument("--behavior-metric", default="euclidean", choices=rsa.METRICS,
                   help="distance between the perceivers' rows of M")
    p.add_argument("--measure", default="auto", choices=("auto", "intensity", "expected_intensity"),
                   help="M from greedy intensities or expected intensities (auto: expected in score mode)")
    p.add_argument("--k", type=int, default=3, help="neighbours of the leave-one-out kNN accuracy")
    p.add_argument("--n-permutations", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0, help="seed of projections and permutations (and of a run)")
    p.add_argument("--allow-partial", action="store_true", help="analyse an unfinished run")
    args = p.parse_args(argv)
    if args.run is None:
        args.setting = args.setting or SETTING_NAMES[0]
    elif args.limit_events is not None or args.events is not None:
        p.error("--limit-events and --events apply to --model only")
    if args.setting is not None:
        try:
            get_setting(args.setting)
        except ValueError as exc:
            p.error(str(exc))
    spans = ["persona", "experiencer"] if args.span == "both" else [s.strip() for s in args.span.split(",")]
    for span in spans:
        if span not in SPANS:
            p.error(f"unknown --span {span!r}; expected persona, experiencer or both")
    args.spans = list(dict.fromkeys(spans))
    if args.n_permutations < 1:
        p.error("--n-permutations must be at least 1")
    return args


def make_run(args: argparse.Namespace) -> Path:
    """Run (or resume) the model on one category and setting with the capture the analysis needs, into OUT/run,
    after timing one batch and printing the estimate."""
    from behavioral.run import RunConfig, run
    from behavioral.suites.intergroup import Options

    out = args.out / RUN_DIR
    options = Options(categories=(args.category,), settings=(args.setting,), events=args.events,
                      limit_events=MODEL_EVENTS if args.limit_events is None else args.limit_events)
    config = RunConfig(suite="intergroup", model=args.model, options=options, seed=args.seed, mode=args.mode,
                       device=args.device, dtype=args.dtype, batch_size=args.batch_size, capture=tuple(args.spans),
                       layers=args.capture_layers, trust_remote_code=args.trust_remote_code)
    loaded = models.load(args.model, args.device, args.dtype, args.trust_remote_code)
    print(f"suite run: {estimate_run(config, loaded, out).describe()} (capture passes extra)", flush=True)
    return run(config, out, loaded=loaded)


def span_token_counts(config: dict, slots: Sequence[str], setting: str, names: Sequence[str],
                      trust_remote_code: bool = False) -> dict[str, list[int]]:
    """Per slot, the tokens of each identity in that slot of the setting's prompt as the run's model reads it (the
    other slot holds "a person"): the control of the partial Mantel test."""
    tokenizer = models.load_tokenizer(config["model"], trust_remote_code)
    chat_format = config.get("chat_format") or detect_format(tokenizer, config.get("prompt_format", "auto"))
    counts: dict[str, list[int]] = {}
    for slot in slots:
        counts[slot] = []
        for name in names:
            fills = {"perceiver": UNSPECIFIED, "experiencer": UNSPECIFIED, slot: name}
            prompt = prompts.build(setting, fills["perceiver"], fills["experiencer"], "anger", "Something happened.")
            counts[slot].append(len(prompt_spans(tokenizer, prompt, chat_format)[1][slot]))
    return counts


def hook_title(hook: str) -> str:
    layer = hook_layer(hook)
    return "embeddings" if layer < 0 else f"layer {layer}"


def projection_grid(panels: list[tuple[str, str, np.ndarray]], labels: list[str], names: list[str],
                    title: str) -> Figure:
    """Rows: projection methods; columns: sources (layers, then behavior); one legend."""
    methods = list(dict.fromkeys(m for m, _, _ in panels))
    sources = list(dict.fromkeys(s for _, s, _ in panels))
    fig = Figure(figsize=(4.2 * len(sources) + 2, 4.0 * len(methods)))
    axes = fig.subplots(len(methods), len(sources), squeeze=False)
    for method, source, points in panels:
        ax = axes[methods.index(method), sources.index(source)]
        clusters.plot_projection(points, labels, names, title=f"{METHOD_TITLES[method]}, {source}", ax=ax,
                                 legend=False)
    handles, texts = axes[0, -1].get_legend_handles_labels()
    fig.legend(handles, texts, fontsize=8, loc="center right", frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1 - 1.9 / fig.get_figwidth(), 1))
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        with output_folder(args.out, COMMAND, keep=(RUN_DIR,)) as out:
            summary, notes = study(args, list(sys.argv[1:] if argv is None else argv), out)
    except (ValueError, OSError) as exc:  # bad input: one line, exit 2
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - any other failure: one message, non-zero exit
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    _print_summary(summary, args.spans)
    for note in notes:
        print(f"note: {note}")
    for path in out.written():
        print(f"wrote {path}")
    return 0


def study(args: argparse.Namespace, argv: list[str], out: OutputFolder) -> tuple[dict, list[str]]:
    """Project, cluster and compare the identity vectors with behaviour, writing every table and figure into `out`;
    returns the summary to print and the notes."""
    run_dir = make_run(args) if args.model is not None else args.run
    manifest = run_store.read_manifest(run_dir)
    config = manifest["config"]
    if config["suite"] != "intergroup":
        raise ValueError(f"--run {run_dir}: a run of suite {config['suite']!r}; the cluster study needs an "
                         "intergroup run made with --capture persona (or experiencer)")
    acts = activation_store.load(run_dir)
    category = get_category(args.category)
    setting = args.setting or next((s for s in SETTING_NAMES if s in config.get("options", {}).get("settings", [])),
                                   None)
    if setting is None:
        raise ValueError(f"{run_dir}: the manifest names no setting; pass --setting")
    measure = args.measure
    if measure == "auto":
        measure = "expected_intensity" if config.get("mode") == "score" else "intensity"
    options = AnalyzeOptions(measure=measure, permutations=args.n_permutations, seed=args.seed)
    analyses = {(a.category.name, a.setting): a for a in load_analyses(run_dir, options, args.allow_partial)}
    if (category.name, setting) not in analyses:
        raise ValueError(f"{run_dir}: no results for {category.name}/{setting}; have {sorted(analyses)}")
    a = analyses[category.name, setting]
    notes = list(a.notes)
    M_rows = a.M[1:] if a.M is not None else None  # perceiver rows, "a person" left out; every experiencer column

    fig_dir, table_dir = out.path / "figures", out.path / "tables"
    table_dir.mkdir(parents=True, exist_ok=True)
    model = config.get("model", "model")
    title = f"{model}, {category.title}, {setting_label(setting)}"
    hooks = list(acts.hooks)
    shown_hooks = select_hooks(args.layers, hooks)
    projections: list[dict] = []
    summary: dict = {}

    names = list(category.identities)
    labels = clusters.category_labels(category.name, names)
    colour_by = labels if labels is not None else names
    short = [category.short_label(n) for n in names]
    if labels is None:
        notes.append(f"{category.name}: no grouping of identities; cluster statistics skipped")

    def add_projection(method: str, source: str, hook: str | None, points: np.ndarray) -> None:
        for name, lab, (x, y) in zip(names, colour_by, points):
            projections.append({"method": method, "source": source, "hook": hook, "identity": name,
                                "label": lab, "x": float(x), "y": float(y)})

    behavior_panels = []
    behavior_stats = None
    if M_rows is not None:
        for method in clusters.METHODS:
            points = clusters.project(M_rows, method, args.seed, metric="euclidean")
            add_projection(method, "behavior", None, points)
            behavior_panels.append((method, "behavior (rows of M)", points))
            fig = clusters.plot_projection(points, colour_by, short,
                                           title=f"{METHOD_TITLES[method]} of perceiver rows of M ({measure}), {title}")
            save_figure(fig, fig_dir, f"proj_{method}_behavior")
        if labels is not None:
            behavior_stats = clusters.cluster_stats(M_rows, labels, args.n_permutations, args.seed, args.k,
                                                    metric="euclidean")
            path = table_dir / "cluster_stats_behavior.csv"
            pd.DataFrame([{"source": "behavior (rows of M)", "measure": measure, **behavior_stats}]).to_csv(
                path, index=False)
            summary["behavior_cluster_stats"] = behavior_stats
    else:
        notes.append(f"{category.name}/{setting}: M undefined; behavior projections and RSA skipped")

    slot_of = {span: acts.meta["spans"][span]["slot"] for span in args.spans}
    token_counts = (span_token_counts(config, list(slot_of.values()), setting, names, args.trust_remote_code)
                    if M_rows is not None else {})
    for span in args.spans:
        vectors, identities = clusters.identity_vectors(acts, category.name, setting, span, args.reduction)
        if identities != names:
            raise ValueError(f"{span} vectors cover {len(identities)} identities, expected {len(names)}: "
                             f"missing {sorted(set(names) - set(identities))}")
        panels = []
        for hook in shown_hooks:
            X = vectors[hooks.index(hook)]
            for method in clusters.METHODS:
                points = clusters.project(X, method, args.seed, metric=args.metric, center=True)
                add_projection(method, span, hook, points)
                panels.append((method, f"{span}, {hook_title(hook)}", points))
                fig = clusters.plot_projection(
                    points, colour_by, short,
                    title=f"{METHOD_TITLES[method]} of {span} vectors ({hook_title(hook)}), {title}")
                save_figure(fig, fig_dir, f"proj_{method}_{span}_{hook.replace('.', '_')}")
        grid = projection_grid(panels + behavior_panels, colour_by, short,
                               f"{span.capitalize()} vectors and behavior, {title}")
        save_figure(grid, fig_dir, f"projection_grid_{span}")

        if labels is not None:
            stats = clusters.layer_stats(vectors, labels, hooks=hooks, metric=args.metric, center=True, k=args.k,
                                         n_permutations=args.n_permutations, seed=args.seed)
            stats.insert(0, "span", span)
            path = table_dir / f"cluster_stats_{span}.csv"
            stats.to_csv(path, index=False)
            reference = (None if behavior_stats is None
                         else {key: behavior_stats[key] for key in ("silhouette", "knn_accuracy")})
            fig = clusters.plot_layer_stats(stats, f"{span.capitalize()} vectors vs {_grouping(category)}, {title}",
                                            reference)
            save_figure(fig, fig_dir, f"cluster_stats_{span}")
            summary[f"cluster_stats_{span}"] = stats.drop(columns=["span"]).to_dict(orient="records")
        if M_rows is not None:
            counts = token_counts[slot_of[span]]
            control = rsa.difference_matrix(counts)
            path = table_dir / f"token_counts_{span}.csv"
            pd.DataFrame({"identity": names, "tokens": counts}).to_csv(path, index=False)
            confound = rsa.rsa(control, rsa.distance_matrix(M_rows, args.behavior_metric))
            summary[f"token_count_vs_behavior_{span}"] = confound
            table = rsa.layer_rsa(vectors, M_rows, hooks, metric=args.metric, behavior_metric=args.behavior_metric,
                                  n_permutations=args.n_permutations, seed=args.seed, control=control)
            table.insert(0, "span", span)
            path = table_dir / f"rsa_{span}.csv"
            table.to_csv(path, index=False)
            fig = rsa.plot_rsa(table, f"RSA: {span} vs behavior ({measure}), {title}")
            save_figure(fig, fig_dir, f"rsa_{span}")
            summary[f"rsa_{span}"] = table.drop(columns=["span"]).to_dict(orient="records")

    path = table_dir / "projections.csv"
    pd.DataFrame(projections).to_csv(path, index=False)

    out.record.update({
        "script": "experiments/nationality_clusters.py",
        "argv": argv,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "run_dir": str(Path(run_dir).absolute()),
        "category": category.name,
        "setting": setting,
        "measure": measure,
        "identities": names,
        "labels": labels,
        "projected_hooks": shown_hooks,
        "distances": {"identity_vectors": f"{args.metric}, centred over identities per layer",
                      "behavior_rows": f"{args.behavior_metric} (RSA), euclidean (projections, cluster statistics)"},
        "tsne_perplexity": clusters.tsne_perplexity(len(names)),
        "umap_n_neighbors": clusters.umap_neighbors(len(names)),
        "notes": notes,
        "run_manifest": manifest,
        "activations_meta": acts.meta,
    })
    return summary, notes


def _grouping(category) -> str:
    return "Inglehart-Welzel zones" if category.zone_of is not None else "groups"


def _print_summary(summary: dict, spans: list[str]) -> None:
    if "behavior_cluster_stats" in summary:
        s = summary["behavior_cluster_stats"]
        print(f"behavior rows of M: silhouette {s['silhouette']:+.3f} (p={s['silhouette_p']:.3f}), "
              f"kNN {s['knn_accuracy']:.3f} (chance {s['knn_null_mean']:.3f}, p={s['knn_p']:.3f})")
    for span in spans:
        stats = {r["hook"]: r for r in summary.get(f"cluster_stats_{span}", [])}
        corr = {r["hook"]: r for r in summary.get(f"rsa_{span}", [])}
        if not stats and not corr:
            continue
        if f"token_count_vs_behavior_{span}" in summary:
            print(f"{span}: token-count difference vs behavior distance, Spearman r = "
                  f"{summary[f'token_count_vs_behavior_{span}']:+.3f}")
        print(f"{span}: {'hook':<26} {'silhouette':>10} {'p':>6} {'kNN':>6} {'p':>6} {'RSA r':>7} {'p':>6} "
              f"{'partial':>7} {'p':>6}")
        for hook in dict.fromkeys([*stats, *corr]):
            s, c = stats.get(hook), corr.get(hook)
            left = (f"{s['silhouette']:>+10.3f} {s['silhouette_p']:>6.3f} {s['knn_accuracy']:>6.3f} {s['knn_p']:>6.3f}"
                    if s else " " * 31)
            right = f" {c['rsa']:>+7.3f} {c['p']:>6.3f} {c['partial_rsa']:>+7.3f} {c['partial_p']:>6.3f}" if c else ""
            print(f"{span}: {hook:<26} {left}{right}")


if __name__ == "__main__":
    sys.exit(main())
