"""Issue 47 (case 5): every value of a sweep file and of `empathy-gap run`'s flags is checked before any model loads
or anything is written, each refusal one line naming the key where it was written ([run], a model, a suite or a
setting) or the flag, without echoing a long value whole; several refusals are a line each."""

from __future__ import annotations

import argparse
import functools
import re
from collections.abc import Callable

import pytest

from behavioral.cli import commands as cli
from behavioral.cli import sweep as sweep_cli
from behavioral.cli.commands import main
from behavioral.suite.registry import get_suite, names
from behavioral.runner.run import RunConfig
from behavioral.suites.intergroup import Options
from behavioral.sweep.config import read_sweep
from tests.test_sweep import INTERGROUP, Loads, _toml

CAPTURE = 'capture = { kinds = ["persona", "final"] }'
LONG = "n" * 300
GREEDY = '\n[suite.intergroup.settings.greedy]\nmode = "score"\n'


Edit = Callable[[str], str]  # a sweep file's text, edited


def _in_model(line: str) -> Edit:
    """An edit adding `line` to the model's table."""
    return lambda t: t.replace('name = "a"', f'name = "a"\n{line}')


def _in_suite(line: str) -> Edit:
    """An edit adding `line` to the suite's table."""
    return lambda t: t.replace('[suite.intergroup]\n', f'[suite.intergroup]\n{line}\n')


def _in_run(line: str) -> Edit:
    """An edit adding `line` to [run]."""
    return lambda t: t.replace("[run]\n", f"[run]\n{line}\n")


@pytest.fixture
def loads(monkeypatch) -> Loads:
    """Every model load of `sweep` (its dry run too) and `run`, recorded: a refused file or flag loads none."""
    recorded = Loads()
    monkeypatch.setattr("behavioral.inference.models.load", recorded)
    for name in ("run_sweep", "plan_sweep"):
        monkeypatch.setattr(sweep_cli, name, functools.partial(getattr(sweep_cli, name), load=recorded))
    return recorded


def _refused(tmp_path, long_model_dir, capsys, edit: Edit, *flags: str) -> list[str]:
    """The error lines of `empathy-gap sweep` on the edited sweep file, checked to be refused with exit status 2,
    each line naming the file, nothing written."""
    path = _toml(tmp_path, [("a", long_model_dir)], INTERGROUP)
    path.write_text(edit(path.read_text()))
    assert main(["sweep", str(path), "--no-progress", *flags]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(line.startswith(f"empathy-gap: error: {path}: ") for line in lines), lines
    assert all(len(line) < 400 for line in lines), lines  # a long value is never echoed whole
    assert not (tmp_path / "sweep").exists()
    return lines


@pytest.mark.parametrize("edit, named", [
    (lambda t: t.replace(CAPTURE, CAPTURE[:-2] + ', layers = "x" }'), "suite.intergroup.capture.layers: unknown "
                                                                       "entry 'x'; expected all, or a comma list of"),
    (lambda t: t.replace(CAPTURE, CAPTURE[:-2] + ', per_cell_samples = -1 }'),
     "suite.intergroup.capture.per_cell_samples must be at least 0, got -1"),
    (lambda t: t.replace('name = "a"', f'name = "{LONG}"'), "model[0].name is 'nnnnnnnn"),
    (lambda t: re.sub(r'\nid = "[^"]*"', '\nid = "' + "o" * 5000 + '"', t), "model[0].id is too long"),
    (lambda t: re.sub(r'\nid = "[^"]*"', '\nid = "org/' + "m" * 97 + '"', t), "model[0].id is too long"),
    (lambda t: t + GREEDY.replace("greedy", LONG), "suite.intergroup.settings has a setting named 'nnnnnnnn"),
    (lambda t: t + '\n[suite.isear]\noptions = { events = "' + "x" * 5000 + '" }\n',
     "suite.isear.options.events is 'xxxxxxxx"),
    (_in_run("seed = -1"), "run.seed must be at least 0, got -1"),
    (_in_suite("temperature = inf"), "suite.intergroup.temperature must be at least 0 and finite, got inf"),
    (_in_suite("temperature = nan"), "suite.intergroup.temperature must be at least 0 and finite, got nan"),
    (lambda t: t.replace('dtype = "fp32"', 'dtype = "fp23"'), "run.dtype is 'fp23'; expected one of auto, fp32"),
    (_in_model('dtype = "fp23"'), "model[0].dtype is 'fp23'; expected one of auto, fp32"),
    (_in_run('mode = "scroe"'), "run.mode is 'scroe'; expected one of generate, score, both"),
    (lambda t: t.replace('mode = "score"', 'mode = "scroe"'), "suite.intergroup.mode is 'scroe'; expected one of"),
    (lambda t: t + GREEDY.replace('"score"', '"scroe"'), "suite.intergroup.settings.greedy.mode is 'scroe'"),
    (lambda t: t.replace('device = "cpu"', 'device = "gpu"'),
     "run.device is 'gpu'; expected auto, cpu, cuda, cuda:N, mps, split or split:DEVICE=SIZE,... (such as "
     "split:0=70GiB,1=70GiB,cpu=200GiB)"),
    (_in_run('prompt_format = "chatty"'), "run.prompt_format is 'chatty'; expected one of auto, chat, plain"),
    (_in_model("batch_size = 0"), "model[0].batch_size must be at least 1, got 0"),
    (_in_run("top_p = 0"), "run.top_p must lie in (0, 1], got 0"),
    (_in_run("samples = 0"), "run.samples must be at least 1, got 0"),
    (lambda t: t.replace("max_new_tokens = 8", "max_new_tokens = 0"), "run.max_new_tokens must be at least 1, got 0"),
    (_in_run("unit_size = 0"), "run.unit_size must be at least 1, got 0"),
    (_in_run("samples = 3"), "run.samples 3 needs generated replies with suite.intergroup.temperature above 0"),
    (lambda t: t.replace('"persona", "final"', '"persona", "finale"'), "unknown suite.intergroup.capture.kinds "
                                                                       "'finale' for suite 'intergroup'"),
    (_in_suite("analysis = 3"), "suite.intergroup.analysis is 3; expected a table"),
    (_in_suite('analysis = { measure = "expected" }'), "suite.intergroup.analysis.measure is 'expected'; expected a "
                                                       "value it accepts (unknown measure 'expected'"),
    (lambda t: t + GREEDY + "analysis = { permutations = 0 }\n",
     "suite.intergroup.settings.greedy.analysis.permutations is 0; expected a value it accepts (--permutations must "
     "be at least 1, got 0)"),
    (lambda t: t + '\n[suite.jaem]\noptions = { tasks = ["ce"], limit = 2 }\nanalysis = { vad_lexicon = "demo" }\n',
     "suite.jaem.analysis.vad_lexicon is 'demo', which names a file, a model or an object"),
])
def test_a_bad_value_is_one_line_naming_the_key_where_it_was_written(tmp_path, long_model_dir, capsys, loads, edit,
                                                                      named):
    lines = _refused(tmp_path, long_model_dir, capsys, edit)
    assert len(lines) == 1 and named in lines[0], lines
    assert loads.calls == []


def test_several_bad_values_are_a_line_each(tmp_path, long_model_dir, capsys, loads):
    def edit(text: str) -> str:
        text = _in_run('seed = -1\nmode = "scroe"')(_in_model("batch_size = 0")(text))
        return text.replace(CAPTURE, CAPTURE[:-2] + ', layers = "x" }') + GREEDY.replace("greedy", LONG)

    lines = _refused(tmp_path, long_model_dir, capsys, edit)
    named = ["run.mode is 'scroe'", "run.seed must be at least 0", "model[0].batch_size must be at least 1",
             "suite.intergroup.capture.layers: unknown entry 'x'", "suite.intergroup.settings has a setting named"]
    assert len(lines) == len(named) and all(any(n in line for line in lines) for n in named), lines
    assert loads.calls == []


def test_the_dry_runs_remote_code_refusal_is_one_line(tmp_path, long_model_dir, capsys, loads):
    lines = _refused(tmp_path, long_model_dir, capsys, _in_model("trust_remote_code = true"), "--dry-run")
    assert len(lines) == 1 and "pass --trust-remote-code to allow it" in lines[0]
    assert loads.calls == []


@pytest.mark.parametrize("flags, named", [
    (["--capture", "persona", "--layers", "x"], "--layers: unknown entry 'x'"),
    (["--seed", "-1"], "--seed must be at least 0, got -1"),
    (["--temperature", "inf"], "--temperature must be at least 0 and finite, got inf"),
    (["--top-p", "2"], "--top-p must lie in (0, 1], got 2"),
    (["--per-cell-samples", "-1"], "--per-cell-samples must be at least 0, got -1"),
    (["--dtype", "fp23"], "--dtype is 'fp23'; expected one of auto, fp32"),
    (["--model", "o" * 5000], "--model is too long"),
])
def test_run_flags_are_checked_before_anything_loads_or_is_written(tiny_model_dir, tmp_path, capsys, loads, flags,
                                                                    named):
    out = tmp_path / "run"
    args = ["run", "intergroup", "--model", str(tiny_model_dir), "--categories", "religion", "--limit-events", "1",
            "--out", str(out), "--device", "cpu", "--no-progress", *flags]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"empathy-gap: error: {named}") and err.count("\n") == 1 and len(err) < 400, err
    assert not out.exists() and loads.calls == []


def test_a_script_gets_the_checks_the_flags_get():
    config = RunConfig("intergroup", "m", Options(categories=("religion",)), seed=-1, layers="0,x")
    with pytest.raises(ValueError, match=r"^--seed must be at least 0, got -1$"):
        config.validate(get_suite("intergroup"))
    assert config.problems(get_suite("intergroup"))[1].startswith("--layers: unknown entry 'x'")


def test_a_models_default_name_from_a_long_id_is_a_folder_name(tmp_path, long_model_dir):
    folder = tmp_path / ("m" * 100)
    folder.symlink_to(long_model_dir)
    path = _toml(tmp_path, [("a", folder)], INTERGROUP)
    path.write_text(path.read_text().replace('name = "a"\n', ""))
    assert read_sweep(path).models[0].name == "m" * 64


def _subparser(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    """The subparser of `parser` that `path` (command, suite) names."""
    for name in path:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return parser


def _sweep_keys(tmp_path, long_model_dir, suite: str) -> list[str]:
    """The option keys a sweep's [suite.SUITE] table takes, as the sweep's refusal of an unknown key lists them."""
    path = _toml(tmp_path, [("a", long_model_dir)], f"\n[suite.{suite}]\noptions = {{ unknown_key = 1 }}\n")
    with pytest.raises(ValueError, match="unknown_key is not an option of suite") as refused:
        read_sweep(path)
    return re.search(r"; expected some of (.*)", str(refused.value)).group(1).split(", ")


@pytest.mark.parametrize("suite", names())
def test_every_options_sweep_key_is_its_run_flag(suite, tmp_path, long_model_dir):
    """`run SUITE --help`'s flag of each suite option is its sweep key with - for _ (one name, no alias)."""
    flags = {a.dest.removeprefix("option_"): a.option_strings
             for a in _subparser(cli._parser(["run", suite]), "run", suite)._actions if a.dest.startswith("option_")}
    keys = _sweep_keys(tmp_path, long_model_dir, suite)
    assert keys and sorted(flags) == sorted(keys)
    assert {key: flags[key] for key in keys} == {key: [f"--{key.replace('_', '-')}"] for key in keys}
