"""Seed 001 as a suite: each item judged under the COT, ID and Raw prompts (and identity swaps), one verdict letter."""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from behavioral.analysis import Analysis, Run, read_runs
from behavioral.rundir.provenance import files_sha256
from behavioral.suites.giebench.card import CARD
from behavioral.suite.protocol import Suite
from behavioral.core.selection import select_rows
from behavioral.suites.giebench.analysis import AnalyzeOptions, analyze
from behavioral.suites.giebench.categories import CATEGORIES
from behavioral.suites.giebench.importer import import_results
from behavioral.suites.giebench.items import (
    DEFAULT_ITEMS, RELEASE_FILES, GieItem, GieRunItem, default_items, load_jsonl, load_release,
)
from behavioral.suites.giebench.metrics import by_identity
from behavioral.suites.giebench.options import USER, GieBenchDeclaration, Options
from behavioral.suites.giebench.prompts import SWAP_TYPES, identity_span
from behavioral.suites.giebench.results import COLUMNS, view
from behavioral.suites.giebench.swaps import resolve_swaps

@dataclass(frozen=True)
class Data:
    """The run's items (sampled), its swaps and where the items came from."""

    options: Options
    items: tuple[GieItem, ...]
    swaps: tuple[tuple[str, str], ...]
    source: str
    sha256: str


def check_shared_opening(items: Sequence[GieItem], prompt_types: Sequence[str], source: str) -> None:
    """Refuse a capture of `user` spans from items whose COT (or ID) prompts differ before the group they name: the
    spans are computed once per prompt type and group, which is right only where every prompt of a type opens alike
    (the template does; the release's verbatim prompts are checked here)."""
    for t in (t for t in prompt_types if t in SWAP_TYPES):
        openings: dict[str, str] = {}
        for item in items:
            text = item.prompt(t)
            openings.setdefault(text[:identity_span(text, item.identity)[0]], item.item_id)
        if len(openings) > 1:
            first, other = list(openings.values())[:2]
            raise ValueError(f"{source}: the {t} prompts of items {first} and {other} differ before the group they "
                             f"name; --capture {USER} needs the prompts of a type to open alike (capture final only)")


def sample_items(items: Sequence[GieItem], n: int | None, seed: int) -> list[GieItem]:
    """A seeded sample of `n` items stratified by category: each category shuffled, then taken in turn."""
    if n is None or n >= len(items):
        return list(items)
    rng = random.Random(seed)
    pools = []
    for category in CATEGORIES:
        pool = [i for i in items if i.category == category]
        rng.shuffle(pool)
        pools.append(pool)
    chosen: list[GieItem] = []
    while len(chosen) < n:
        for pool in pools:
            if pool and len(chosen) < n:
                chosen.append(pool.pop(0))
    keep = {id(i) for i in chosen}
    return [i for i in items if id(i) in keep]


class GieBench(GieBenchDeclaration, Suite):
    """Seed 001: GIEBench (Wang et al., arXiv 2406.14903), identity-conditioned judging of four answers."""

    rows_hold = "question ids, categories, identities and correct letters, not the prompts"
    card = CARD
    AnalyzeOptions = AnalyzeOptions

    def user_data(self, config: Mapping[str, Any]) -> str | None:
        """The benchmark data or items file a run read (`--data`, `--items`), else None (the shipped items)."""
        options = config.get("options") or {}
        return options.get("data") or options.get("items")

    def dataset(self, config) -> Data:
        options = config.options or Options()
        if options.data:
            items = load_release(options.data)
            source, digest = options.data, files_sha256(Path(options.data) / f for f in RELEASE_FILES.values())
        else:
            path = Path(options.items) if options.items else DEFAULT_ITEMS
            items = load_jsonl(path) if options.items else default_items()
            source, digest = options.items or "embedded", files_sha256([path])
        items = [i for i in items if i.category in options.categories]
        sampled = sample_items(items, options.limit_items, config.seed)
        if not sampled:
            raise ValueError(f"{source}: no items in categories {', '.join(options.categories)}")
        if USER in config.capture:
            check_shared_opening(sampled, options.prompt_types, source)
        swaps = resolve_swaps(options.swap, (i.identity for i in sampled))
        return Data(options, tuple(sampled), tuple(swaps), source, digest)

    def facts(self, data: Data) -> dict:
        return {"items_source": data.source, "items_sha256": data.sha256, "n_items": len(data.items),
                "swaps": [list(s) for s in data.swaps]}

    def groups(self, data: Data) -> Iterable[tuple[str, list[GieRunItem]]]:
        """One group per prompt type, then one per swap tuple and swapped type."""
        for t in data.options.prompt_types:
            yield t, [GieRunItem(i, t) for i in data.items]
        for si, sj in data.swaps:
            holders = [i for i in data.items if i.identity == si]
            for t in data.options.prompt_types:
                if t in SWAP_TYPES and holders:
                    yield f"{SWAP_TYPES[t]}:{si}>{sj}", [GieRunItem(i, SWAP_TYPES[t], sj) for i in holders]

    def import_results(self, args: argparse.Namespace) -> Path:
        return import_results(args.results, args.name, args.out)

    def view(self, rows: pd.DataFrame, config: dict) -> pd.DataFrame:
        return view(rows, config)

    def behaviour(self, run: Run, **where) -> pd.DataFrame:
        """Per group of kind `user`: accuracy under COT, ID and Raw on its questions and the shifts from Raw
        (metrics.by_identity); a `both` run is read by its generated verdicts unless `where` picks mode="score"."""
        rows = select_rows(run.rows, where, "the run's rows")
        if rows["mode"].nunique() > 1:
            rows = rows[rows["mode"] == "generate"]
        out = by_identity(rows)
        out.insert(0, "kind", USER)
        return out

    def analyze(self, runs: Sequence[Run], options: AnalyzeOptions | None = None) -> Analysis:
        return analyze(runs, options or AnalyzeOptions())


SUITE = GieBench()


def results(run_dir: str | Path, allow_partial: bool = True) -> pd.DataFrame:
    """The view of one run directory with a first column `run` (its name in tables: the model's name); a partial run
    is refused unless `allow_partial`."""
    run = read_runs(SUITE, [run_dir], allow_partial)[0]
    return run.rows.assign(run=run.name)[["run", *COLUMNS]]
