"""Every registered suite: a card, items with unique ids and fields, and early stopping that never changes a parsed
answer (decoding stops once `decided` says so; the parse must equal that of decoding to the limit)."""

from __future__ import annotations

from itertools import islice
from pathlib import Path

import pytest

from behavioral.inference import chat
from behavioral.inference.engine import Engine
from behavioral.runner.run import RunConfig
from behavioral.suite.registry import get_suite, names
from behavioral.suites import giebench, intergroup, isear, jaem, scm
from tests.test_engine import _talkative_model

# A small configuration of each suite; a new suite adds its own here.
CONFIGS = {
    "intergroup": RunConfig("intergroup", "tiny", intergroup.Options(categories=("religion",),
                                                                     settings=("P0S0T0", "P0S1T0"), limit_events=2)),
    "jaem": RunConfig("jaem", "tiny", jaem.Options(tasks=("ce",), limit=30)),
    "giebench": RunConfig("giebench", "tiny", giebench.Options(limit_items=11, swap="paper")),
    "isear": RunConfig("isear", "tiny", isear.Options(events="project"), seed=123),
    "scm": RunConfig("scm", "tiny", scm.Options(groups="us-stereotypes")),
}
SUITES = [n for n in names() if n in CONFIGS]
# Suites whose answers the digit-favouring model below never writes test early stopping with their own model.
OWN_EARLY_STOPPING_TEST = {"jaem": "tests/test_jaem.py", "giebench": "tests/test_giebench.py",
                           "isear": "tests/test_isear.py", "scm": "tests/test_scm.py"}


def test_every_packaged_suite_is_tested():
    assert set(names()) == set(CONFIGS)  # a test that registers a suite unregisters it (suites.registered)


def _items(name: str, n: int = 24) -> list:
    suite = get_suite(name)
    data = suite.dataset(CONFIGS[name])
    return list(islice((item for _, items in suite.groups(data) for item in items), 0, None, 5))[:n]


@pytest.mark.parametrize("name", SUITES)
def test_suite_has_a_card_and_well_formed_items(name):
    suite = get_suite(name)
    card = Path(__file__).resolve().parents[1] / "behavioral" / "suites" / name / "README.md"
    assert card.is_file() and len(card.read_text()) > 500
    assert suite.description and len(suite.description.splitlines()) == 1
    items = _items(name, 200)
    assert len({item.item_id for item in items}) == len(items)
    for item in items:
        assert tuple(item.fields) == suite.fields
        assert item.prompt().messages and item.answers.labels


@pytest.mark.parametrize("name", [n for n in SUITES if n not in OWN_EARLY_STOPPING_TEST])
@pytest.mark.parametrize("seed", [4, 5])
def test_early_stopping_gives_the_parsed_answers_of_decoding_to_the_limit(name, seed, tiny_tokenizer):
    model = _talkative_model(tiny_tokenizer, seed)
    items = _items(name)
    ids = [chat.encode(tiny_tokenizer, item.prompt(), chat.SYSTEM) for item in items]
    engine = Engine(model, tiny_tokenizer, batch_size=8, max_new_tokens=128)
    full = engine.generate(ids)
    early = engine.generate(ids, until=[getattr(item, "decided", None) for item in items])
    assert [item.parse(g.text) for item, g in zip(items, early)] == \
        [item.parse(g.text) for item, g in zip(items, full)]
    assert sum(item.parse(g.text).label is not None for item, g in zip(items, full)) >= 3
    assert sum(len(e.text) < len(f.text) for e, f in zip(early, full)) >= 3  # it did stop early
