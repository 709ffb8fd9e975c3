"""What the clusters and RSA studies read of a run, through its suite's hooks: the identity vectors of one span kind
in the suite's order with its grouping, the suite's behaviour of the same identities, and how many tokens each
identity's slot took."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from activations.store import ActivationStore
from behavioral.analysis.runs import Run
from behavioral.core.selection import values_of
from behavioral.suite.protocol import Suite

WHERE_HELP = ("select activations by an index field, FIELD=VALUE (e.g. category=nationality); a field given twice "
              "selects either value")


def parse_where(entries: Sequence[str]) -> dict[str, str | list[str]]:
    """`--where FIELD=VALUE` entries as a store selection: a field given twice selects either value; an entry
    without a field or value is a ValueError naming it."""
    where: dict[str, list[str]] = {}
    for entry in entries:
        field, sep, value = entry.partition("=")
        if not sep or not field.strip() or not value.strip():
            raise ValueError(f"--where {entry!r}: expected FIELD=VALUE, e.g. category=nationality")
        where.setdefault(field.strip(), []).append(value.strip())
    return {field: values[0] if len(values) == 1 else values for field, values in where.items()}


def where_text(where: dict) -> str:
    """A selection as titles and plans print it: ``category=race, setting=P0S0T0``, or ``all rows``."""
    return ", ".join(f"{k}={','.join(map(str, values_of(v)))}" for k, v in where.items()) or "all rows"


def suite_of(run: Run) -> Suite:
    """The suite a run was made by."""
    from behavioral.suite.registry import get_suite

    return get_suite(run.config["suite"])


def span_kind(run: Run, kind: str | None) -> str:
    """The span kind a study reads of a run: `kind`, or the first span kind its suite declares; a kind the suite
    does not declare is a ValueError naming --kind and the suite's kinds."""
    suite = suite_of(run)
    kinds = list(suite.capture.spans) if suite.capture is not None else []
    if not kinds:
        raise ValueError(f"{run.run_dir}: suite {suite.name} declares no identity spans to read")
    if kind is None:
        return kinds[0]
    if kind not in kinds:
        raise ValueError(f"--kind {kind!r} is not a span kind of suite {suite.name}; expected one of "
                         f"{', '.join(kinds)}")
    return kind


@dataclass(frozen=True)
class Identities:
    """One run's identity vectors of a span kind (hooks × identities × d_model, every captured hook), the
    identities in the suite's order, their grouping (None: none) and the store they came from."""

    kind: str
    vectors: np.ndarray
    names: list[str]
    labels: list[str] | None
    store: ActivationStore


def read_identities(store: ActivationStore, suite: Suite, kind: str, reduction: str, where: dict) -> Identities:
    """The identities of `kind` among the rows `where` selects, each the mean of its rows (e.g. over settings), in
    the order and grouping the suite's `identity_set` gives."""
    vectors, names = store.identities(kind, reduction, **where)
    order, labels = suite.identity_set(kind, names)
    if not order:
        raise ValueError(f"{store.root.parent}: no {kind} identities to compare among {', '.join(names)} "
                         f"({where_text(where)})")
    return Identities(kind, vectors[:, [names.index(name) for name in order]], order, labels, store)


def behaviour_rows(run: Run, kind: str, names: Sequence[str], where: dict) -> tuple[np.ndarray, list[str]]:
    """The suite's behaviour of the identities `names` of `kind` (identities × features) over the features defined
    for every one of them, and the features' names; NotImplementedError where the suite declares none."""
    frame = suite_of(run).behaviour(run, **where)
    rows = frame[frame["kind"] == kind].set_index("identity")
    missing = [name for name in names if name not in rows.index]
    if missing:
        raise ValueError(f"{run.run_dir}: the suite's behaviour has no {kind} row for {missing[0]!r} "
                         f"({len(missing)} of {len(names)} identities missing) under {where_text(where)}")
    table = rows.loc[list(names)].drop(columns="kind").dropna(axis=1)
    if table.shape[1] == 0:
        raise ValueError(f"{run.run_dir}: no behaviour feature is defined for every one of the {len(names)} {kind} "
                         f"identities under {where_text(where)}")
    return table.to_numpy(dtype=np.float64), list(table.columns)


def slot_tokens(run: Run, kind: str, names: Sequence[str], where: dict, trust_remote_code: bool = False) -> list[int]:
    """How many tokens each identity's slot of `kind` took as the run's model read it: from the first of the run's
    items (in run order, among those `where` selects) that holds the identity, the slot's states depending only on
    the prompt up to the slot's end (the capture spec's prefix rule). Rebuilds the run's items from its manifest and
    its cached preparations (no model is loaded; the tokenizer is)."""
    from activations.spans import prompt_spans
    from behavioral.inference.chat import detect_format
    from behavioral.inference.models import load_tokenizer
    from behavioral.runner.run import RunConfig

    suite, config = suite_of(run), RunConfig.from_run_dir(run.run_dir)
    slot, fields = suite.capture.spans[kind]
    selected = {field: set(values_of(value)) for field, value in where.items()}
    wanted, first = set(names), {}
    data = suite.prepare(suite.dataset(config), config, None, None, run.run_dir)
    for _, items in suite.groups(data):
        for item in items:
            name = item.fields[fields[-1]]
            if name in wanted and name not in first and all(item.fields[f] in v for f, v in selected.items()):
                first[name] = item
        if len(first) == len(wanted):
            break
    missing = sorted(wanted - set(first))
    if missing:
        raise ValueError(f"{run.run_dir}: no item of the run holds {kind} {missing[0]!r} under {where_text(where)}")
    tokenizer = load_tokenizer(config.model, trust_remote_code)
    chat_format = run.config.get("chat_format") or detect_format(tokenizer, config.prompt_format)
    return [len(prompt_spans(tokenizer, first[name].prompt(), chat_format)[1][slot]) for name in names]
