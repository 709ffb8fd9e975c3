"""Each run setting is declared once, on its RunConfig field (behavioral.runner.settings): a field added to a copy of
the declaration appears as an `empathy-gap run` flag that reads into it, with its check, in the resume identity and
among a sweep table's keys; and the manifest's rules (a table of the run directory's layer, below the runner) know
every setting a manifest records."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from behavioral.rundir.manifest import CONFIG
from behavioral.runner import config as run_config
from behavioral.runner.config import RunConfig, run_defaults
from behavioral.runner.settings import (
    add_setting_flags, added_since, checks, config_from_flags, identity_fields, setting, sweep_keys,
)
from behavioral.suite.registry import get_declaration


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


def test_the_derived_tables_are_the_runs_own():
    assert run_config.SETTING_CHECKS == checks(RunConfig)
    assert run_config.IDENTITY == identity_fields(RunConfig)
    assert added_since(RunConfig).items() <= run_config.ADDED.items()


def test_the_manifests_rules_know_every_setting_a_manifest_records_and_take_its_default():
    recorded = set(identity_fields(RunConfig)) | {"answer_tree", "tree_tolerance"}
    assert recorded <= set(CONFIG)
    defaults = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    for name in recorded - {"suite", "model"}:
        default = defaults[name] if defaults[name] is not None else run_config.RUN_DEFAULTS[name]
        _, accepts = CONFIG[name]
        assert accepts(json.loads(json.dumps(list(default) if isinstance(default, tuple) else default))), name
