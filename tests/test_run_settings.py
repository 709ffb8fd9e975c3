"""Each run setting is declared once, on its RunConfig field (behavioral.runner.settings): a field added to a copy of
the declaration appears as an `empathy-gap run` flag that reads into it, with its check, in the resume identity, among a
sweep table's keys and in the check of a manifest's record of it; and every setting a manifest records is checked,
by the run directory's own reader where that layer reads it, else by its declaration."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from behavioral.rundir.manifest import CONFIG, MANIFEST, RunDirError
from behavioral.runner import config as run_config
from behavioral.runner.config import RunConfig, run_defaults
from behavioral.runner.settings import (
    add_setting_flags, added_since, checks, config_from_flags, identity_fields, recorded_checks, setting, sweep_keys,
)
from behavioral.suite.registry import get_declaration
from tests.conftest import PINNED


def _refuse_odd(value, name):
    if value % 2 == 0:
        raise ValueError(f"{name} must be odd, got {value}")


@dataclasses.dataclass(frozen=True)
class WithBeams(RunConfig):
    """RunConfig with one more setting, declared as every setting is."""

    beams: int = setting(3, "beams kept while decoding (default {default})", check=_refuse_odd, identity=True,
                         since=1, sweep=("run", "suite"), flag={"metavar": "N"})


def test_a_new_setting_appears_as_a_flag_a_check_an_identity_and_sweep_keys():
    suite = get_declaration("intergroup")
    parser = argparse.ArgumentParser()
    add_setting_flags(parser, WithBeams, run_defaults(suite))
    assert "beams kept while decoding (default 3)" in parser.format_help()
    args = parser.parse_args(["--model", "m", "--beams", "5"])
    config = config_from_flags(WithBeams, args, suite, suite="intergroup", options=suite.Options())
    assert config.beams == 5 and config.model == "m"
    assert parser.parse_args(["--model", "m"]).beams == 3
    with pytest.raises(ValueError, match="--beams must be odd, got 4"):
        checks(WithBeams)["beams"](4, "--beams")
    assert "beams" in identity_fields(WithBeams) and added_since(WithBeams)["beams"] == 1
    assert sweep_keys(WithBeams, "run")["beams"] == "beams" and "beams" in sweep_keys(WithBeams, "suite")
    assert "beams" not in sweep_keys(WithBeams, "model")
    recorded = recorded_checks(WithBeams)["beams"]
    recorded(5, "config.beams")
    with pytest.raises(ValueError, match='config.beams is "5"; expected a whole number'):
        recorded("5", "config.beams")
    with pytest.raises(ValueError, match="config.beams must be odd, got 4"):
        recorded(4, "config.beams")


def test_the_derived_tables_are_the_runs_own():
    assert run_config.SETTING_CHECKS == checks(RunConfig)
    assert run_config.IDENTITY == identity_fields(RunConfig)
    assert added_since(RunConfig).items() <= run_config.ADDED.items()


def test_every_setting_a_manifest_records_is_checked_and_its_default_passes():
    stored = json.loads((PINNED / "run" / MANIFEST).read_text())["config"]
    suite_facts = {"corpus_hash", "events_hash", "n_events"}  # the suite's data facts, checked by the suite
    recorded = set(identity_fields(RunConfig)) | {"answer_tree", "tree_tolerance", "backend", "vllm_args"}
    assert set(stored) - suite_facts <= set(CONFIG) | set(run_config.RECORDED)
    assert recorded <= set(CONFIG) | set(run_config.RECORDED)
    defaults = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    for name in recorded - {"suite", "model", "vllm_args"}:
        default = defaults[name] if defaults[name] is not None else run_config.RUN_DEFAULTS[name]
        run_config.RECORDED[name](json.loads(json.dumps(list(default) if isinstance(default, tuple) else default)),
                                  f"config.{name}")
    run_config.check_recorded(stored, PINNED / "run" / MANIFEST)  # a real run's record passes
    with pytest.raises(RunDirError, match=r"manifest.json: config.top_p must lie in \(0, 1\], got 2 \(is the"):
        run_config.check_recorded(stored | {"top_p": 2}, PINNED / "run" / MANIFEST)
