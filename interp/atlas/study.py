"""The identity atlas study (`empathy-gap interp atlas RUN_DIR...`): whether the identities several suites name
(intergroup's persona "a Muslim", GIEBench's user group "Islam", SCM's "Muslim people") are the same states inside
one model, layer by layer, and whether one suite's identity geometry follows another suite's behaviour. The numbers
are interp.atlas's; this module reads the runs, the mapping file and each suite's behaviour, and writes the report."""

from __future__ import annotations

import csv
import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from activations.capture import EMBED_HOOK, select_hooks
from activations.store import REDUCTIONS, load
from behavioral.report.formats import literal
from behavioral.analysis.runs import Run
from behavioral.report.blocks import Analysis, Figure, Section, Table, scope
from behavioral.core.options import SEED, check_bounds, option
from behavioral.analysis.study import Study
from behavioral.suite.protocol import Suite
from interp.atlas import Atlas, Source, atlas, plot_heatmap, plot_layers, shared_concepts, test_keys

MAP_FILE = Path(__file__).with_name("identity_map.csv")
MAP_COLUMNS = ("concept", "suite", "kind", "identity")
ANY_KIND = "*"
ALPHA = 0.05
P_FORMATS = {c: "p" for c in ("p", "p_fwe", "p_floor", "p_rank", "embed_p_fwe")} | {"n_concepts": "count", "n_features": "count"}


@dataclass(frozen=True)
class Options:
    """What the atlas compares: the mapping file, the hooks, the span reduction and the permutation nulls."""

    identity_map: str = option(str(MAP_FILE), "CSV of concept,suite,kind,identity rows naming the identities suites "
                                              "share", name="--map", metavar="FILE")
    layers: str = option("all", "hooks compared, as run --layers names them: all, or a comma list of block numbers "
                                "(negative ones count back), a-b ranges, embed, first, middle, last or hook names",
                         metavar="LAYERS")
    permutations: int = option(1000, "permutations of every null (the same ones at every layer)", metavar="N",
                               minimum=1)
    seed: int = option(0, "seed of the permutations", metavar="N", **SEED)
    reduction: str = option("mean", "a span's state: the mean over its tokens or its last token's",
                            choices=REDUCTIONS)

    def __post_init__(self):
        check_bounds(self)
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"--reduction {self.reduction!r}; expected one of {', '.join(REDUCTIONS)}")


@dataclass(frozen=True)
class MapRow:
    """One row of a mapping file and its line number."""

    concept: str
    suite: str
    kind: str
    identity: str
    line: int


def _overlap(a: MapRow, b: MapRow) -> bool:
    """True where two rows of one suite can apply to the same span kind."""
    return a.suite == b.suite and (a.kind == b.kind or ANY_KIND in (a.kind, b.kind))


def _check_row(path: Path, row: MapRow, suite_names: Sequence[str]) -> None:
    from behavioral.suite.registry import get_suite

    where = f"{path}:{row.line}"
    if row.suite not in suite_names:
        raise ValueError(f"{where}: field 'suite' is {row.suite!r}; expected one of {', '.join(suite_names)}")
    spec = get_suite(row.suite).capture
    if spec is not None and row.kind not in (*spec.spans, ANY_KIND):
        raise ValueError(f"{where}: field 'kind' is {row.kind!r}; expected a span kind of {row.suite} "
                         f"({', '.join(spec.spans)}) or {ANY_KIND}")


def read_map(path: str | Path) -> list[MapRow]:
    """The rows of a mapping file (comment lines start with #; header concept,suite,kind,identity), each checked:
    four non-empty fields, a known suite, a span kind of its capture spec (or *), one identity per concept and kind
    and one concept per identity and kind; a ValueError names the file, line, field and value."""
    from behavioral.suite.registry import names

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--map {path}: no such file; expected a CSV of {','.join(MAP_COLUMNS)} rows")
    lines = [(n, line) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines or next(csv.reader([lines[0][1]])) != list(MAP_COLUMNS):
        found = lines[0][1] if lines else "no header"
        raise ValueError(f"{path}:{lines[0][0] if lines else 1}: header is {found!r}; expected {','.join(MAP_COLUMNS)}")
    rows: list[MapRow] = []
    for n, line in lines[1:]:
        fields = [f.strip() for f in next(csv.reader([line]))]
        if len(fields) != len(MAP_COLUMNS) or not all(fields):
            raise ValueError(f"{path}:{n}: row {line!r} has {len(fields)} fields; expected {len(MAP_COLUMNS)} "
                             f"non-empty ones ({','.join(MAP_COLUMNS)})")
        row = MapRow(*fields, line=n)
        _check_row(path, row, names())
        for other in (o for o in rows if _overlap(row, o)):
            if (row.concept, row.identity) == (other.concept, other.identity):
                raise ValueError(f"{path}:{n}: repeats line {other.line}; expected each row once")
            if row.concept == other.concept or row.identity == other.identity:
                raise ValueError(f"{path}:{n}: {row.suite} {row.identity!r} -> {row.concept!r} clashes with line "
                                 f"{other.line} ({other.identity!r} -> {other.concept!r}); expected one identity "
                                 "per concept and one concept per identity in each span kind")
        rows.append(row)
    return rows


def concepts_of(rows: Sequence[MapRow], suite: str, kind: str) -> dict[str, str]:
    """identity -> concept of one suite's span kind, from a mapping's rows (its own rows and the suite's * rows)."""
    return {r.identity: r.concept for r in rows if r.suite == suite and r.kind in (kind, ANY_KIND)}


@dataclass(frozen=True)
class Loaded:
    """What the atlas reads from the runs: its sources, their mappings and behaviour, the hooks, a table describing
    the sources, notes on what was left out and the mapping file's sha256."""

    sources: dict[str, Source]
    mapping: dict[str, dict[str, str]]
    behaviour: dict[str, pd.DataFrame]
    hooks: list[str]
    described: pd.DataFrame
    left_out: tuple[str, ...]
    no_behaviour: tuple[str, ...]
    map_sha256: str


def _one_model(runs: Sequence[Run], stores: Sequence) -> None:
    """A ValueError unless every run holds the same model (by its weights' hash where the manifests record one, else
    by name) with the same d_model."""
    models = {r.config.get("model_hash") or r.config.get("model"): f"{r.config.get('model')}" for r in runs}
    if len(models) > 1:
        named = ", ".join(f"{name} ({str(key)[:12]})" for key, name in models.items())
        raise ValueError(f"the runs hold different models ({named}); expected runs of one model, whose states the "
                         "atlas compares")
    widths = {f"{r.run_dir}: {s.meta.get('d_model')}": s.meta.get("d_model") for r, s in zip(runs, stores)}
    if len(set(widths.values())) > 1:
        raise ValueError(f"the runs' activations differ in d_model ({', '.join(widths)}); expected one model's "
                         "states")


def _hooks(stores: Sequence, spec: str) -> list[str]:
    """The hooks every store holds, selected by --layers."""
    common = [h for h in stores[0].hooks if all(h in s.hooks for s in stores[1:])]
    if not common:
        raise ValueError("the runs' captures share no layer; expected captures of the same layers")
    return select_hooks(spec, common, "--layers")


def _behaviour(suite: Suite, run: Run, kinds: Sequence[str]) -> tuple[dict[str, pd.DataFrame], str | None]:
    """A run's behaviour per span kind (frames indexed by identity, float features), or a note where its suite
    declares none."""
    try:
        frame = suite.behaviour(run)
    except NotImplementedError as err:
        return {}, f"{literal(run.name)}: no behaviour RSA ({err})"
    if not {"kind", "identity"} <= set(frame.columns):
        raise ValueError(f"suite {suite.name}: behaviour has columns {', '.join(map(str, frame.columns))}; expected "
                         "kind, identity and one float column per feature")
    out = {}
    for kind, part in frame.groupby("kind", sort=False):
        if kind not in kinds:
            continue
        part = part.drop(columns="kind").set_index("identity")
        if part.index.duplicated().any():
            raise ValueError(f"suite {suite.name}: behaviour of kind {kind!r} repeats identity "
                             f"{part.index[part.index.duplicated()][0]!r}; expected one row per identity")
        try:
            out[kind] = part.astype(float)
        except (TypeError, ValueError):
            raise ValueError(f"suite {suite.name}: behaviour of kind {kind!r} has non-numeric features "
                             f"({', '.join(c for c in part.columns if not pd.api.types.is_numeric_dtype(part[c]))}); "
                             "expected float features") from None
    return out, None


@functools.lru_cache(maxsize=1)
def load_sources(runs: tuple[Run, ...], options: Options) -> Loaded:
    """Every span kind of every run as a source: identity vectors (the suite's identity set, each the mean of its
    rows) on the selected hooks, the mapping's concepts and the suite's behaviour. The last call is cached: plan and
    analyze share one read."""
    from behavioral.suite.registry import get_suite

    rows = read_map(options.identity_map)
    stores = [load(r.run_dir) for r in runs]
    _one_model(runs, stores)
    hooks = _hooks(stores, options.layers)
    sources, mapping, behaviour, described, left_out, no_behaviour = {}, {}, {}, [], [], []
    for run, store in zip(runs, stores):
        suite = get_suite(run.config["suite"])
        kinds = list(store.meta.get("spans", {}))
        if not kinds:
            raise ValueError(f"{run.run_dir}: its activations hold no identity span; expected a capture of "
                             f"{suite.name}'s span kinds")
        features, note = _behaviour(suite, run, kinds)
        no_behaviour += [note] if note else []
        at = [store.hooks.index(h) for h in hooks]
        for kind in kinds:
            vectors, names = store.identities(kind, options.reduction)
            keep, _ = suite.identity_set(kind, names)
            name = f"{run.name}: {kind}"
            concept_of = concepts_of(rows, suite.name, kind)
            mapped = [concept_of[i] for i in keep if i in concept_of]
            described.append({"source": name, "run": run.name, "suite": suite.name, "kind": kind,
                              "slot_field": store.slot_field(kind), "n_identities": len(keep),
                              "n_mapped": len(mapped), "concepts": ", ".join(mapped)})
            if len(keep) < 2:
                left_out.append(f"{literal(name)}: left out ({len(keep)} identity; its vectors are centred on their "
                                "mean)")
                continue
            sources[name] = Source(vectors[at][:, [names.index(i) for i in keep]], keep, hooks)
            mapping[name] = concept_of
            if kind in features:
                behaviour[name] = features[kind]
    digest = hashlib.sha256(Path(options.identity_map).read_bytes()).hexdigest()
    return Loaded(sources, mapping, behaviour, hooks, pd.DataFrame(described), tuple(left_out), tuple(no_behaviour),
                  digest)


def _best(frame: pd.DataFrame) -> pd.DataFrame:
    """Each test's row at its best hook (largest value; smallest for mean_rank)."""
    key = np.where(frame["statistic"] == "mean_rank", frame["value"], -frame["value"].astype(float))
    ordered = frame.assign(_key=key).sort_values("_key", kind="stable", na_position="last")
    tests = test_keys(frame)
    best = ordered.groupby(tests, sort=False).head(1).drop(columns="_key")
    return best.sort_values(tests, kind="stable").reset_index(drop=True)


SOURCES_TEXT = (
    "A source is one run's span kind: the identity slot of its prompts (intergroup's persona and experiencer, "
    "GIEBench's user group, isear's role-played gender, SCM's rated group, each JaEm attribute), read at the slot's "
    "tokens. Each identity's vector is the mean over the run's rows that hold it (settings, categories, templates), "
    "the suite's baseline identities left out. Concepts are matched by the mapping file (see the manifest for its "
    "path and hash); identities it does not name stay among the rank candidates. Before any cosine, every source is "
    "centred on its mean identity, since the identities of one source share their template (\"a person from ...\"), "
    "which would otherwise dominate every cosine.")
CLOSENESS_TEXT = (
    "mean_cosine: the mean over shared concepts of the cosine between a concept's centred vectors in the two "
    "sources. mean_rank: for each concept of source_a, the rank of its match among all of source_b's identities "
    "by cosine (1: the match is the nearest), averaged; `chance` is the rank a random match would have on average. "
    "Both are tested against shuffling which concept maps to which (p, one-sided); p_fwe corrects across layers "
    "(max statistic over the same permutations); p_floor is the smallest p the number of concepts allows. The "
    "table shows each pair at its best layer: picking it is what p_fwe pays for. A rank near 1 says the states "
    "share a direction beyond the template; it cannot say the model uses that direction the same way in both "
    "prompts, and synonyms among the candidates (intergroup's five names for White people) push ranks up. "
    "`embed_value` and `embed_p_fwe` are the same test at hook_embed (in this table and the two below): the lexical "
    "baseline, what the token embeddings alone give.")
GEOMETRY_TEXT = (
    "Spearman r between the two sources' cosine-distance triangles over their shared concepts: do the concepts "
    "lie in the same arrangement in both? Mantel p (one-sided), p_fwe across layers. With few shared concepts the "
    "triangle holds few pairs (3 concepts: 3 distances) and the test is weak: read p_floor; pairs with fewer than 3 "
    "concepts are listed as not testable.")
BEHAVIOUR_TEXT = (
    "Spearman r between source_a's geometry over the concepts it shares with source_b and source_b's behaviour per "
    "identity (the suite's behaviour features, each z-scored over those concepts; Euclidean distance), Mantel p "
    "permuting the behaviour, p_fwe across layers. source_a = source_b asks whether a suite's own states follow its "
    "own behaviour on the shared concepts; otherwise whether one suite's representation predicts another suite's "
    "behaviour (e.g. the intergroup persona against SCM's warmth). Concepts are compared in blocks that define the "
    "same features (intergroup's features are one category's ratings, so its religions and nationalities form two "
    "blocks); features constant over a block are dropped.")


def _with_embedding(best: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """Each test's best-hook row with the same test's value and p_fwe at hook_embed beside it (`embed_value`,
    `embed_p_fwe`: the lexical baseline, what the token embeddings alone give); unchanged where hook_embed was not
    compared."""
    if not len(best) or not (frame["hook"] == EMBED_HOOK).any():
        return best
    keys = test_keys(frame)
    embed = frame.loc[frame["hook"] == EMBED_HOOK, [*keys, "value", "p_fwe"]]
    return best.merge(embed.rename(columns={"value": "embed_value", "p_fwe": "embed_p_fwe"}), on=keys, how="left")


def _floors(frame: pd.DataFrame) -> str:
    """The range of a table's p floors, as the scope prints it."""
    low, high = frame["p_floor"].min(), frame["p_floor"].max()
    return f"{low:.3g}" if low == high else f"{low:.3g} to {high:.3g}"


def scope_lines(loaded: Loaded, result: Atlas, options: Options, pairs: pd.DataFrame,
                best: dict[str, pd.DataFrame]) -> tuple[list[str], list[str]]:
    """What this atlas can and cannot show, from its own sources, hooks, permutations, behaviour and the tests'
    values at hook_embed."""
    can, cannot = [], []
    hooks, shared = len(result.hooks), pairs[pairs["n_concepts"] > 0]
    if len(result.closeness):
        concepts = shared["n_concepts"]
        counts = f"{concepts.min()}" if concepts.min() == concepts.max() else f"{concepts.min()} to {concepts.max()}"
        can.append(f"Whether the identities that {len(loaded.sources)} sources of one model share are closer to their "
                   f"matches than to the sources' other identities (mean cosine, mean rank), at {hooks} hooks: "
                   f"{len(shared)} source pairs sharing {counts} concepts, each against {options.permutations} "
                   f"shuffles of the concept matching (seed {options.seed}; p floor {_floors(result.closeness)}); "
                   f"p_fwe pays for picking the best of the {hooks} hooks.")
    else:
        cannot.append("Whether shared identities are close: no two sources share a concept under the map.")
    if len(result.geometry):
        pairs_tested = result.geometry.groupby(test_keys(result.geometry)).ngroups
        can.append(f"Whether the shared concepts lie in the same arrangement in two sources ({pairs_tested} pairs "
                   f"with at least 3 shared concepts; p floor {_floors(result.geometry)}).")
    else:
        cannot.append("Whether shared concepts lie alike in two sources: no pair shares 3 concepts.")
    if len(result.behaviour):
        can.append(f"Whether a source's geometry follows a suite's behaviour on the concepts they share "
                   f"({len(loaded.behaviour)} sources with behaviour; p floor {_floors(result.behaviour)}).")
    else:
        why = "; ".join(loaded.no_behaviour) or "no source with behaviour shares 3 concepts with another"
        cannot.append(f"Whether any geometry follows behaviour: {why}.")
    if EMBED_HOOK in result.hooks:
        lexical = []
        for key in ("closeness", "geometry", "behaviour"):
            rows = best[key]
            if len(rows) and "embed_p_fwe" in rows:
                lexical.append(f"{int((rows['embed_p_fwe'] < ALPHA).sum())} of {len(rows)} {key} tests")
        can.append(f"How much of each match the token embeddings alone give: every best row has the same test at "
                   f"{EMBED_HOOK} beside it (`embed_value`, `embed_p_fwe`)"
                   + (f"; {', '.join(lexical)} are significant there already (p_fwe < {ALPHA}), where shared "
                      "tokens can explain the match." if lexical else "."))
    else:
        cannot.append(f"How much of a match is lexical: {EMBED_HOOK} is not among --layers "
                      f"{literal(options.layers)}.")
    cannot += [
        "States of different models: they live in different spaces, so the runs must share the model.",
        "The identity apart from its frame: \"a Muslim\" as the persona that rates, as the group a judge is told "
        "the user belongs to, or as the group whose warmth is asked; each slot's state depends on everything before "
        "it in its prompt (the capture's prefix rule).",
        "Shared meaning where words are shared: where two suites write the same word, the embeddings and early "
        "layers match by the token alone; only a match that persists, or appears, deeper says more than that.",
        "That the model uses a shared direction or a matching geometry to produce either suite's answers "
        "(patching and steering ask that).",
        "Anything independent of the identity sets: each source is centred on its own identities' mean, so adding "
        "identities to one suite moves it."]
    return can, cannot


def _tables(result: Atlas) -> dict[str, Table]:
    """The atlas's full tables, by analysis."""
    p = P_FORMATS
    return {
        "concepts": Table("concepts", "Each shared concept's cosine and rank, per source pair and layer",
                          result.concepts, p | {"rank": "count", "n_candidates": "count"}),
        "closeness": Table("closeness", "Closeness of shared identities per layer", result.closeness, p),
        "geometry": Table("geometry_rsa", "RSA between sources' identity geometries per layer", result.geometry, p),
        "behaviour": Table("behaviour_rsa", "RSA of each source's geometry with each source's behaviour per layer",
                           result.behaviour, p),
    }


def _figures(result: Atlas, sources: Sequence[str]) -> dict[str, list[Figure]]:
    """The per-layer curves of each analysis with rows, and the heatmap at the layer of highest mean RSA."""
    out: dict[str, list[Figure]] = {"closeness": [], "geometry": [], "behaviour": []}
    closeness = result.closeness
    for statistic, label in (("mean_cosine", "mean cosine of matches"), ("mean_rank", "mean rank of matches")):
        rows = closeness[closeness["statistic"] == statistic]
        if len(rows):
            title = f"Shared identities: {label} per layer"
            out["closeness"].append(Figure(f"closeness_{statistic}", title, plot_layers(rows, label, title, ALPHA)))
    for key, frame, label in (("geometry", result.geometry, "RSA between sources"),
                              ("behaviour", result.behaviour, "RSA with behaviour")):
        if len(frame):
            out[key].append(Figure(f"{key}_rsa", f"{label} per layer",
                                   plot_layers(frame, "Spearman r", f"{label} per layer", ALPHA)))
    if len(result.geometry):
        hook = result.geometry.groupby("hook", sort=False)["value"].mean().idxmax()
        out["geometry"].append(Figure("geometry_heatmap", f"RSA between sources at {literal(hook)}",
                                      plot_heatmap(result.geometry, list(sources), hook, ALPHA)))
    return out


class AtlasStudy(Study):
    """The identity atlas across suites (interp.atlas)."""

    name = "atlas"
    description = ("identity atlas: are the identities several suites share the same states in one model? closeness, "
                   "RSA between suites, RSA with behaviour, per layer")
    Options = Options

    def plan(self, runs: Sequence[Run], options: Options) -> str:
        loaded = load_sources(tuple(runs), options)
        pairs = shared_concepts(loaded.sources, loaded.mapping)
        listed = "; ".join(f"{r.source} ({r.n_identities} identities, {r.n_mapped} mapped)"
                           for r in loaded.described.itertuples())
        shared = "; ".join(f"{r.source_a} ~ {r.source_b}: {r.n_concepts}"
                           for r in pairs[pairs["n_concepts"] > 0].itertuples()) or "none"
        hooks = loaded.hooks
        return (f"{len(loaded.sources)} sources: {listed}. Shared concepts per pair: {shared}. {len(hooks)} hooks "
                f"({hooks[0]}..{hooks[-1]}); {options.permutations} permutations (seed {options.seed}); "
                f"map {options.identity_map}.")

    def analyze(self, runs: Sequence[Run], options: Options, out: Path, progress: bool = True) -> Analysis:
        loaded = load_sources(tuple(runs), options)
        result = atlas(loaded.sources, loaded.mapping, loaded.behaviour, options.permutations, options.seed,
                       progress)
        pairs = shared_concepts(loaded.sources, loaded.mapping)
        tables, figures = _tables(result), _figures(result, list(loaded.sources))
        best = {key: _with_embedding(_best(tables[key].frame), tables[key].frame)
                for key in ("closeness", "geometry", "behaviour")}
        sections = [
            Section("Sources and shared concepts", SOURCES_TEXT + "".join(f"\n\n{n}." for n in loaded.left_out), (
                Table("sources", "The sources compared", loaded.described, {"n_identities": "count",
                                                                             "n_mapped": "count"}),
                Table("pairs", "Concepts each pair of sources shares", pairs, {"n_concepts": "count"}))),
            Section("Shared-identity closeness", CLOSENESS_TEXT,
                    (Table("closeness_best", "Closeness at each pair's best layer", best["closeness"], P_FORMATS),),
                    tuple(figures["closeness"])),
            Section("RSA between sources", GEOMETRY_TEXT,
                    (Table("geometry_best", "RSA between sources at each pair's best layer", best["geometry"],
                           P_FORMATS),), tuple(figures["geometry"])),
            Section("RSA with behaviour", BEHAVIOUR_TEXT + "".join(f"\n\n{n}." for n in loaded.no_behaviour),
                    (Table("behaviour_best", "RSA with behaviour at each pair's best layer", best["behaviour"],
                           P_FORMATS),), tuple(figures["behaviour"])),
            Section("Not testable", "Pairs and analyses left out, and why.",
                    (Table("untestable", "Pairs not testable", result.untestable, {"n_concepts": "count"}),)),
            scope(*scope_lines(loaded, result, options, pairs, best)),
        ]
        files = [tables["concepts"], tables["closeness"], tables["geometry"], tables["behaviour"]]
        return Analysis(
            "Identity atlas", "One model's identity states across suites (docs/ATLAS.md).",
            sections, [f"{len(result.hooks)} hooks, {options.permutations} permutations, seed {options.seed}, "
                       f"{options.reduction} over each span's tokens; alpha {ALPHA} for the figures' markers."],
            files, record={"identity_map": {"path": str(Path(options.identity_map).resolve()),
                                            "sha256": loaded.map_sha256}, "hooks": result.hooks})


STUDY = AtlasStudy()
