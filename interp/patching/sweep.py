"""Patching many prompts at once: one table row per (target, spec), layer × position-group sweeps, their summary and
heatmap."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from activations.capture import EMBED_HOOK, Layers, n_layers_of, resolve_layers, table_layer
from behavioral.inference.answer_space import AnswerTrie
from behavioral.analysis.figure_style import MIN_FONT, count_range, heatmap_ticks, n_text, new_figure, styled
from behavioral.report.blocks import Figure as ReportFigure
from behavioral.report.blocks import Section, Table
from interp.patching.run import Job, PatchScores, run_jobs
from interp.patching.spec import PatchError, PatchPrompt, PatchSpec

SWEEP_POSITION_GROUPS = ("persona_end:1", "persona_end", "persona_mean", "system")
METRICS = ("expected", "expected_clean", "expected_source", "delta_expected", "greedy_clean", "greedy",
           "logp_greedy_clean", "logp_greedy", "delta_logp_greedy", "frac_closed", "start_mass")
SWEEP_COLUMNS = ("prompt", "layer", "positions", *METRICS)  # evaluate adds "layers" and the meta columns


def _unique(prompts: Sequence[PatchPrompt]) -> tuple[list[PatchPrompt], list[int]]:
    """Distinct prompts (by ids) and the index of each input among them."""
    first: dict[tuple[int, ...], PatchPrompt] = {}
    for p in prompts:
        first.setdefault(p.ids, p)
    index = {ids: i for i, ids in enumerate(first)}
    return list(first.values()), [index[p.ids] for p in prompts]


def _metrics(clean: PatchScores, patched: PatchScores, source: PatchScores) -> dict:
    gap = source.expected - clean.expected
    delta = patched.expected - clean.expected
    lp_clean = clean.logp(clean.greedy)
    lp = patched.logp(clean.greedy)
    return {
        "expected": patched.expected, "expected_clean": clean.expected, "expected_source": source.expected,
        "delta_expected": delta, "greedy_clean": clean.greedy, "greedy": patched.greedy,
        "logp_greedy_clean": lp_clean, "logp_greedy": lp, "delta_logp_greedy": lp - lp_clean,
        "frac_closed": delta / gap if abs(gap) > 1e-9 else math.nan, "start_mass": patched.start_mass,
    }


def evaluate(engine, targets: Sequence[PatchPrompt], sources: Sequence[PatchPrompt],
             specs: Sequence[Sequence[PatchSpec]], trie: AnswerTrie, meta: Sequence[Mapping] | None = None,
             progress: str | None = None) -> pd.DataFrame:
    """One row per (target i, spec in specs[i]) patched from sources[i]: prompt, layer (the deepest patched layer as
    activations.capture.table_layer writes it: -1 for hook_embed), layers (the hook names patched, comma-separated),
    positions, meta[i]'s columns, then the metrics (see `sweep`). Clean targets and clean sources are scored in the
    same engine call as the patched ones; `progress` labels a progress bar."""
    if not len(targets) == len(sources) == len(specs):
        raise PatchError(f"{len(targets)} targets, {len(sources)} sources and {len(specs)} spec lists; expected "
                         "one source and one list of specs per target")
    distinct, idx = _unique([*targets, *sources])
    n = len(targets)
    clean_jobs = sorted(set(idx))
    wanted = [(i, spec) for i in range(n) for spec in specs[i]]
    jobs = [Job(i) for i in clean_jobs] + [Job(idx[i], idx[n + i], spec) for i, spec in wanted]
    scores = run_jobs(engine, distinct, jobs, trie, progress)
    clean = dict(zip(clean_jobs, scores[:len(clean_jobs)]))
    n_layers = n_layers_of(engine.model)
    rows = []
    for (i, spec), s in zip(wanted, scores[len(clean_jobs):]):
        hooks = spec.hooks(n_layers)
        row = {"prompt": i, "layer": table_layer(hooks[-1]) if hooks else None, "layers": ",".join(hooks),
               "positions": spec.label}
        row |= dict(meta[i]) if meta is not None else {}
        row |= _metrics(clean[idx[i]], s, clean[idx[n + i]])
        rows.append(row)
    extra = [k for k in (meta[0] if meta else {}) if k not in SWEEP_COLUMNS]
    return pd.DataFrame(rows, columns=[*SWEEP_COLUMNS[:3], "layers", *extra, *SWEEP_COLUMNS[3:]])


def sweep(engine, targets: Sequence[PatchPrompt], sources: Sequence[PatchPrompt], layers: Layers,
          trie: AnswerTrie, groups: Sequence[str] = SWEEP_POSITION_GROUPS, meta: Sequence[Mapping] | None = None,
          progress: str | None = None) -> pd.DataFrame:
    """Layer × position-group sweep: each target patched from its source at ONE layer of `layers`
    (activations.capture.resolve_layers, hook_embed allowed) and one group at a time.

    Columns (SWEEP_COLUMNS, then meta's): prompt (index into targets), layer, positions (group label), expected
    (patched expected intensity), expected_clean, expected_source (both unpatched), delta_expected, greedy_clean
    (the target's unpatched greedy answer), greedy (patched), logp_greedy_clean / logp_greedy (log-probability of
    greedy_clean's token path, its end included, before / after patching), delta_logp_greedy, frac_closed
    (delta_expected / (expected_source - expected_clean): the fraction of the source-target difference closed,
    e.g. the in-group/out-group difference when the target is an in-group prompt and the source an out-group one;
    NaN where that difference is below 1e-9), start_mass (patched: the probability that the first answer token
    starts a number).
    """
    hooks = resolve_layers(layers, n_layers_of(engine.model), embed=True)
    specs = [PatchSpec.parse(g, hook) for hook in hooks for g in groups]
    return evaluate(engine, targets, sources, [specs] * len(targets), trie, meta, progress)


def summarize(frame: pd.DataFrame, by: Sequence[str] = ("layer", "positions")) -> pd.DataFrame:
    """Per group: mean delta_expected and delta_logp_greedy, frac_closed as a ratio of sums (sum of deltas over the
    sum of source-target differences, stable where single differences are near zero), and n."""
    gap = frame["expected_source"] - frame["expected_clean"]
    work = frame.assign(_gap=gap)
    out = work.groupby(list(by), sort=False).agg(
        delta_expected=("delta_expected", "mean"), delta_logp_greedy=("delta_logp_greedy", "mean"),
        _delta_sum=("delta_expected", "sum"), _gap_sum=("_gap", "sum"), n=("delta_expected", "size"),
    ).reset_index()
    ok = out["_gap_sum"].abs() > 1e-9
    out["frac_closed"] = (out["_delta_sum"] / out["_gap_sum"].where(ok)).where(ok)
    return out.drop(columns=["_delta_sum", "_gap_sum"])


def layer_label(layer: int) -> str:
    """A ``layer`` column value (activations.capture.table_layer) as figures label it: ``embed`` for hook_embed's,
    else the block number."""
    return "embed" if layer == table_layer(EMBED_HOOK) else str(layer)


@styled
def heatmap_figure(summary: pd.DataFrame, value: str = "frac_closed", title: str | None = None) -> Figure:
    """Layer (rows) × position group (columns) heatmap of `value` from `summarize`, a column wide, its tick labels
    fitted to the cells; the title ends with the prompts per cell."""
    grid = summary.pivot_table(index="layer", columns="positions", values=value, aggfunc="mean", sort=False)
    grid = grid.reindex(columns=list(dict.fromkeys(summary["positions"])))
    grid = grid.sort_index()
    fig = new_figure(1, min(8.0, 1.6 + 0.22 * grid.shape[0]))
    ax = fig.add_subplot()
    data = grid.to_numpy(dtype=float)
    finite = np.abs(data[np.isfinite(data)])
    lim = float(finite.max()) if finite.size else 1.0
    im = ax.imshow(data, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
    ax.set_xlabel("position group")
    ax.set_ylabel("layer")
    if grid.shape[0] * grid.shape[1] <= 200:
        for (i, j), v in np.ndenumerate(data):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=MIN_FONT)
    fig.colorbar(im, ax=ax, label=value)
    ax.set_title(f"{title or f'patching: {value}'}\n{n_text(prompts=count_range(summary['n']))} per cell")
    heatmap_ticks(ax, list(grid.columns), [layer_label(v) for v in grid.index])
    return fig


def sweep_section(summary: pd.DataFrame, subtitle: str, text: str) -> Section:
    """The sweep's report section: its summary table (`summarize`) under `text`, and the two heatmaps."""
    frac = heatmap_figure(summary, "frac_closed", f"fraction of in/out-group difference closed\n{subtitle}")
    delta = heatmap_figure(summary, "delta_expected", f"Δ expected intensity\n{subtitle}")
    return Section("In-group prompts patched from an out-group persona", text,
                   (Table("sweep_summary", "Layer × position group", summary, {"n": "count"}),),
                   (ReportFigure("figures/sweep_frac_closed", "Fraction of the difference closed", frac),
                    ReportFigure("figures/sweep_delta_expected", "Change of the expected intensity", delta)))
