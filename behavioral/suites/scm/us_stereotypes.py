"""Converter of the U.S. Stereotypes ratings (Cao et al., NAACL 2022; TristaCao/U.S_Stereotypes @ 5b1f382,
`dataset/data_full.json`, MIT) into this suite's human reference: per-annotator 0-100 scores on bipolar trait pairs
(100 = the right pole) become 1-5 ratings of the `us-stereotypes` groups.

    python -m behavioral.suites.scm.us_stereotypes data_full.json behavioral/suites/scm/data/us_stereotypes.csv
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from behavioral.suites.scm.groups import GROUPS

REPOSITORY, COMMIT = "TristaCao/U.S_Stereotypes", "5b1f382"
# Bipolar pair -> the trait of Table 2 its right pole names.
TRAIT_PAIRS = {
    "untrustworthy - trustworthy": "trustworthy",
    "dishonest - sincere": "sincere",
    "cold - warm": "warm",
    "repellent - likable": "likable",
    "unconfident - confident": "confident",
    "unassertive - competitive": "competitive",
}
COLUMNS = ("group", "trait", "rater", "rating", "source", "score")


def rating(score: int) -> int:
    """A 0-100 score as a 1-5 rating: 0-19 -> 1, 20-39 -> 2, 40-59 -> 3, 60-79 -> 4, 80-100 -> 5."""
    return min(5, score // 20 + 1)


def _score(value, where: str) -> int:
    text = str(value).strip()
    if not text.isdigit() or not 0 <= int(text) <= 100:
        raise ValueError(f"{where}: score {value!r}; expected an integer 0-100")
    return int(text)


def convert(path: str | Path) -> pd.DataFrame:
    """The ratings of `data_full.json` (annotator -> source group -> trait pair -> score) for the `us-stereotypes`
    groups and traits, long: group, trait, rater (`{source}/{annotator}`), rating, source, score; in group, trait,
    rater order."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err})") from None
    target = {source: group.name for group in GROUPS["us-stereotypes"] for source in group.sources}
    rows = []
    for annotator, rated in data.items():
        for source, scores in rated.items():
            if source not in target:
                continue
            for pair, value in scores.items():
                if pair in TRAIT_PAIRS:
                    score = _score(value, f"{path}: {annotator} / {source} / {pair}")
                    rows.append((target[source], TRAIT_PAIRS[pair], f"{source}/{annotator}", rating(score), source,
                                 score))
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    order = {g.name: i for i, g in enumerate(GROUPS["us-stereotypes"])}
    traits = {t: i for i, t in enumerate(TRAIT_PAIRS.values())}
    keys = frame.group.map(order) * 100 + frame.trait.map(traits)
    return frame.assign(_key=keys).sort_values(["_key", "rater"], kind="stable").drop(columns="_key") \
        .reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    """Write the converted ratings as CSV."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="data_full.json of " + REPOSITORY)
    parser.add_argument("csv", help="output CSV")
    args = parser.parse_args(argv)
    try:
        convert(args.json).to_csv(args.csv, index=False)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
