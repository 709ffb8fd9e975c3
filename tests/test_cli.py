"""The `empathy-gap` command line: run, analyze, errors with exit status 2, `all` expansion, the console script."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from behavioral.rundir.manifest import MANIFEST
from behavioral.cli import commands as cli
from behavioral.core.options import choices
from behavioral.runner.run import RunConfig
from behavioral.rundir.parts import read_results
from behavioral.suite.registry import get_suite, names
from behavioral.suites.intergroup.groups import CATEGORIES
from behavioral.suites.intergroup.settings import SETTING_NAMES


def _run_args(model_dir, out, *extra):
    return ["run", "intergroup", "--model", str(model_dir), "--categories", "religion", "--settings", "P0S0T0",
            "--limit-events", "2", "--out", str(out), "--device", "cpu", "--dtype", "fp32", "--mode", "both",
            "--max-new-tokens", "8", "--no-progress", *extra]


def test_run_then_analyze(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "D"
    assert cli.main(_run_args(tiny_model_dir, out)) == 0
    assert str(out) in capsys.readouterr().out
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["config"]["mode"] == "both" and manifest["config"]["options"]["settings"] == ["P0S0T0"]
    rows = read_results(out)
    assert len(rows) == 36 * 2
    assert rows["response"].notna().all() and rows["expected"].notna().all()  # both modes' columns

    assert cli.main(["analyze", str(out), "--permutations", "100"]) == 0
    report = out / "analysis" / "report.md"
    assert report.is_file() and report.read_text().strip()
    assert str(report) in capsys.readouterr().out


def test_rerun_resumes_and_changed_config_is_exit_2(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "D"
    args = _run_args(tiny_model_dir, out, "--mode", "score")
    assert cli.main(args) == 0
    parts = sorted((out / "results").iterdir())
    assert cli.main(args) == 0  # same command again: resume, nothing left to do
    assert sorted((out / "results").iterdir()) == parts
    capsys.readouterr()
    assert cli.main(_run_args(tiny_model_dir, out, "--mode", "score", "--seed", "3")) == 2
    err = capsys.readouterr().err
    assert "empathy-gap: error:" in err and "seed" in err


def test_unknown_category_is_exit_2_and_creates_nothing(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "D"
    args = _run_args(tiny_model_dir, out)
    args[args.index("religion")] = "nope"
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    assert "'nope'" in captured.err and "religion" in captured.err
    assert captured.err.count("\n") == 1  # one message, no traceback
    assert not out.exists()


def test_missing_events_file_is_exit_2(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "D"
    assert cli.main(_run_args(tiny_model_dir, out, "--events", str(tmp_path / "nowhere.tsv"))) == 2
    assert "nowhere.tsv" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("suite", ["intergroup", "isear"])
def test_a_file_name_too_long_to_look_up_is_one_short_line(suite, tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "D"
    argv = ["run", suite, "--model", str(tiny_model_dir), "--events", "a" * 5000, "--out", str(out), "--no-progress"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 300 and "(5000 characters)" in err
    assert not out.exists()


def test_analyze_of_a_non_run_is_exit_2(tmp_path, capsys):
    assert cli.main(["analyze", str(tmp_path)]) == 2
    assert MANIFEST in capsys.readouterr().err


def test_analyze_of_a_missing_folder_says_it_does_not_exist(tmp_path, capsys):
    missing = tmp_path / "no-such-run"
    assert cli.main(["analyze", str(missing)]) == 2
    assert capsys.readouterr().err == f"empathy-gap: error: {missing}: no such run directory\n"


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "intergroup", "--categories", "religion"])  # no --model, no --out
    assert exit_.value.code == 2
    assert "--model" in capsys.readouterr().err


@pytest.mark.parametrize("values, expected", [
    (None, SETTING_NAMES),
    (["all"], SETTING_NAMES),
    (["P0S0T0", "all"], SETTING_NAMES),
    (["P0S1T0"], ("P0S1T0",)),
    (["P0S1T0,P0S0T0"], ("P0S1T0", "P0S0T0")),
    (["P0S0T2", "P0S0T1, P0S0T2"], ("P0S0T2", "P0S0T1")),
])
def test_settingchoices(values, expected):
    assert choices(values, SETTING_NAMES, "setting") == expected


def test_all_settings_are_the_seven_of_table2():
    assert choices(["all"], SETTING_NAMES, "setting") == (
        "P0S0T0", "P1S0T0", "P2S0T0", "P3S0T0", "P0S1T0", "P0S0T1", "P0S0T2")
    assert choices(["all"], tuple(CATEGORIES), "category") == ("race", "nationality", "religion")


def test_unknown_choice_names_it():
    with pytest.raises(ValueError, match="'P5S0T0'"):
        choices(["P0S0T0,P5S0T0"], SETTING_NAMES, "setting")


def test_suites_lists_each_suite_in_one_line(capsys):
    assert cli.main(["suites"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == names() and "intergroup" in names()
    assert any(line.startswith("intergroup") and "δ" in line for line in lines)


def test_suite_flags_belong_to_the_suite(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "intergroup", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--categories", "--settings", "--events", "--limit-events", "--model", "--temperature"):
        assert flag in text
    with pytest.raises(SystemExit):
        cli.main(["run", "nope", "--model", "m", "--out", "o"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("flags, samples", [([], 2), (["--mode", "score"], 1), (["--temperature", "0"], 1),
                                            (["--samples", "3"], 3), (["--mode", "both"], 2)])
def test_a_suites_run_defaults_apply_and_its_sample_count_only_where_replies_are_sampled(flags, samples, capsys):
    """scm samples two replies per item at temperature 1 by default; score mode and greedy decoding need one."""
    parser = cli._parser(["run", "scm"])
    config = cli.run_config(parser.parse_args(["run", "scm", "--model", "m", "--out", "o", *flags]))
    assert (config.prompt_format, config.temperature, config.max_new_tokens, config.samples) == \
        ("plain", 0.0 if "--temperature" in flags else 1.0, 16, samples)
    assert cli.run_config(cli._parser(["run", "intergroup"]).parse_args(
        ["run", "intergroup", "--model", "m", "--out", "o"])).prompt_format == "auto"
    with pytest.raises(SystemExit):
        cli.main(["run", "scm", "--help"])
    assert "(default 16)" in capsys.readouterr().out


def test_a_script_runs_the_protocol_the_cli_runs():
    """RunConfig built in Python gets the suite's own decoding defaults, as `empathy-gap run` does."""
    for name in ("scm", "isear", "intergroup"):
        args = cli._parser(["run", name]).parse_args(["run", name, "--model", "m", "--out", "o"])
        assert cli.run_config(args) == RunConfig(name, "m", options=get_suite(name).Options())


def test_a_command_loads_only_the_suite_it_names():
    assert cli._suites_to_load(["run", "intergroup", "--model", "m"]) == ["intergroup"]
    assert cli._suites_to_load(["import", "giebench", "--results", "r"]) == ["giebench"]
    assert cli._suites_to_load(["analyze", "run_dir"]) == [] and cli._suites_to_load(["demo"]) == []
    assert cli._suites_to_load(["run", "--help"]) == names()


def test_analyze_help_shows_the_suites_own_flags(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "D"
    assert cli.main(_run_args(tiny_model_dir, out, "--mode", "score")) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main(["analyze", str(out), "--help"])
    text = capsys.readouterr().out
    assert "--round-cells" in text and "--measure" in text and "--permutations" in text


@pytest.mark.slow
def test_console_script_help():
    exe = shutil.which("empathy-gap")
    assert exe, "console script empathy-gap is not installed (pip install -e .)"
    done = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    for command in ("run", "analyze", "demo"):
        assert command in done.stdout


def test_answer_tree_flags_reach_the_rows_and_a_change_of_tree_is_refused_on_resume(tiny_model_dir, tmp_path, capsys):
    full, lazy = tmp_path / "full", tmp_path / "lazy"
    assert cli.main(_run_args(tiny_model_dir, full, "--mode", "score", "--answer-tree", "full")) == 0
    assert cli.main(_run_args(tiny_model_dir, lazy, "--mode", "score", "--tree-tolerance", "0.01")) == 0
    a, b = read_results(full), read_results(lazy)
    assert (a["tree_nodes"] == 101).all() and (a[["expected_bound", "probs_bound", "entropy_bound"]] == 0).all().all()
    assert (b["tree_nodes"] <= 101).all() and (b[["expected_bound", "probs_bound"]] <= 0.01).all().all()
    assert json.loads((lazy / "manifest.json").read_text())["config"]["tree_tolerance"] == 0.01
    capsys.readouterr()
    assert cli.main(_run_args(tiny_model_dir, full, "--mode", "score")) == 2  # lazy now, full before
    err = capsys.readouterr().err
    assert "answer_tree: stored 'full', now 'lazy'" in err and err.count("\n") == 1


@pytest.mark.parametrize(("flag", "value", "message"), [("--tree-tolerance", "1.5", "must lie in [0, 1), got 1.5"),
                                                        ("--answer-tree", "half", "invalid choice: 'half'")])
def test_a_bad_answer_tree_setting_is_exit_2_and_creates_nothing(tiny_model_dir, tmp_path, capsys, flag, value,
                                                                 message):
    out = tmp_path / "D"
    try:
        code = cli.main(_run_args(tiny_model_dir, out, "--mode", "score", flag, value))
    except SystemExit as exit_:  # argparse's own refusal of a choice
        code = exit_.code
    assert code == 2 and message in capsys.readouterr().err
    assert not out.exists()
