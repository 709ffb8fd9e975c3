"""A run's plan: the work units and rows of the whole run (every rank's), which analyses check it holds, from one
pass over its items; and the plan of an old run whose manifest records none, derived without the model. Nothing here
imports torch, so the reader of a run directory does not."""

from __future__ import annotations

import json
from pathlib import Path

from behavioral.inference.answer_spec import AnswerSpec
from behavioral.rundir.manifest import Manifest, Plan, planned_units
from behavioral.runner.config import RunConfig
from behavioral.suite.protocol import Suite
from behavioral.suite.registry import get_suite


def survey(suite: Suite, data) -> tuple[tuple[tuple[str, int], ...], tuple[AnswerSpec, ...]]:
    """Each group of the whole run (every rank's) with its number of items, and the answer sets its items score, from
    one pass over the items (a full grid holds tens of millions)."""
    groups, specs = [], {}
    for group, items in suite.groups(data):
        if len(items):
            groups.append((group, len(items)))
        for item in items:  # items share their set's object: by identity, as hashing a set is slow
            if item.answers is not None and id(item.answers) not in specs:
                specs[id(item.answers)] = item.answers
    return tuple(groups), tuple(dict.fromkeys(specs.values()))


def plan(config: RunConfig, groups: tuple[tuple[str, int], ...]) -> Plan:
    """The work units and result rows of the whole run, which analyses check it holds, from its `groups` (survey),
    which name its units."""
    units = planned_units(groups, config.unit_size, config.samples)
    return Plan(len(units), sum(units.values()), groups)


def derived_plan(run_dir: str | Path, manifest: Manifest) -> Plan:
    """The plan of a run whose manifest records none (made before plans were recorded), from its configuration and
    data without the model: the suite's data read and prepared from what the run directory caches, checked to be
    the data the run recorded. A ValueError says why it cannot be derived (data gone or changed, a cache missing)."""
    config = RunConfig.from_run_dir(run_dir)
    suite = get_suite(config.suite)
    data = suite.prepare(suite.dataset(config), config, None, None, Path(run_dir))
    facts = json.loads(json.dumps(suite.facts(data)))
    changed = [f"{k} recorded {manifest.config.get(k)!r}, now {v!r}" for k, v in facts.items()
               if manifest.config.get(k) != v]
    if changed:
        raise ValueError(f"its data are not those the run recorded ({'; '.join(changed)})")
    return plan(config, survey(suite, data)[0])
