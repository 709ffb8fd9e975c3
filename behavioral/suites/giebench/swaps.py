"""Identity swaps (Tables 3 and 7): S_i's COT and ID prompts name S_j instead, everything else kept."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

PAPER_SWAPS = Path(__file__).parent / "data" / "paper_swaps.csv"  # Table 3's (Young, Older) + Table 7's 37 tuples


def identity_key(name: str) -> str:
    """How identity names are matched: ignoring case, apostrophes and surrounding space ("Bachelor's" = "bachelors")."""
    return name.replace("'", "").replace("’", "").strip().lower()


def paper_swaps() -> list[tuple[str, str]]:
    """The paper's 38 directional tuples (S_i, S_j), Table 3's first."""
    with PAPER_SWAPS.open(newline="", encoding="utf-8") as f:
        return [(row["s_i"], row["s_j"]) for row in csv.DictReader(f)]


def parse_swaps(spec: str) -> list[tuple[str, str]]:
    """`none`, `paper` or "Si=Sj;..." as directional (S_i, S_j) tuples."""
    spec = spec.strip()
    if spec in ("", "none"):
        return []
    if spec == "paper":
        return paper_swaps()
    pairs = []
    for part in (p.strip() for p in spec.split(";")):
        if not part:
            continue
        si, sep, sj = (s.strip() for s in part.partition("="))
        if not sep or not si or not sj or identity_key(si) == identity_key(sj):
            raise ValueError(f"--swap {part!r}: expected S_i=S_j, two different identities, e.g. "
                             "\"Young people=Older people\"")
        pairs.append((si, sj))
    return pairs


def resolve_swaps(spec: str, identities: Iterable[str]) -> list[tuple[str, str]]:
    """The swaps of `spec` spelled as the items spell their identities. A user's tuple must name identities of the
    items; the paper's tuples whose S_i no item holds are left out (an S_j no item holds keeps the paper's spelling)."""
    known = {identity_key(name): name for name in identities}
    paper = spec.strip() == "paper"
    resolved = []
    for si, sj in parse_swaps(spec):
        missing = [s for s in (si, sj) if identity_key(s) not in known]
        if missing and not paper:
            raise ValueError(f"--swap: unknown identity {missing[0]!r}; expected one of the items' identities: "
                             f"{', '.join(sorted(known.values()))}")
        if identity_key(si) in known:
            resolved.append((known[identity_key(si)], known.get(identity_key(sj), sj)))
    return resolved
