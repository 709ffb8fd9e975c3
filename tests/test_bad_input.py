"""Bad input of every command is refused the same way: one line `empathy-gap: error: ...` naming the flag, key or
value and what was expected, exit status 2, before anything is written; a script that builds the options gets a
ValueError naming the field's flag."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from behavioral.cli.commands import main
from behavioral.suite.registry import get_suite
from behavioral.runner.run import RunConfig, run
from behavioral.suites import intergroup, isear
from interp.patching import study as patching
from interp.probes import study as probes
from interp.steering import study as steering
from tests.conftest import files_under

HUGE = 10 ** 23  # no count, size or limit of any option
HUGE_SEED = 2 ** 80  # above every seed (below 2**63)


def _refused(capsys, argv: list, named: str, *watched: Path) -> str:
    """The error line of `empathy-gap argv`, checked to be exit status 2 and one line starting `empathy-gap: error:`
    that names `named` (any other line a warning), with nothing written under the `watched` folders."""
    before = files_under(*watched)
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:  # argparse's refusals exit from inside the parser
        code = exit_.code
    lines = capsys.readouterr().err.splitlines()
    errors = [line for line in lines if line.startswith("empathy-gap: error: ")]
    assert code == 2 and len(errors) == 1, lines
    assert all(line.startswith("empathy-gap: warning: ") for line in lines if line not in errors), lines
    assert named in errors[0], errors
    assert files_under(*watched) == before and sorted(files_under(*watched)) == sorted(before)
    return errors[0]


def _run(model_dir: Path, out: Path, *flags) -> list:
    """`empathy-gap run intergroup` of one category, setting and event into `out`, with `flags`."""
    return ["run", "intergroup", "--model", model_dir, "--out", out, "--categories", "religion", "--settings",
            "P0S0T0", "--limit-events", "1", "--mode", "score", "--device", "cpu", "--no-progress", *flags]


def _study(name: str, run_dir: Path, *flags) -> list:
    """`empathy-gap interp NAME RUN_DIR` with `flags` (a study that reruns the model: on the CPU)."""
    return ["interp", name, run_dir, "--no-progress", *(["--device", "cpu"] if name in ("steer", "patch") else []),
            *flags]


# --- 1, 2: a study's float option ----------------------------------------------------------------------------------

def test_a_steering_coefficient_nan_is_refused_before_any_rerun_is_written(pinned_run, capsys):
    _refused(capsys, _study("steer", pinned_run, "--in-sample", "--coef", "nan"), "--coef", pinned_run)
    assert not (pinned_run / "interp").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_patching_equivalence_margin_not_finite_is_refused(value, pinned_run, capsys):
    line = _refused(capsys, _study("patch", pinned_run, "--limit-events", "1", "--sweep-events", "0",
                                   f"--equivalence-margin={value}"), "--equivalence-margin", pinned_run)
    assert "finite" in line and not (pinned_run / "interp").exists()


# --- 3: argparse's refusals ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, named", [
    (["demo", "--limit-events", "nan"], "argument --limit-events: expected a whole number, got 'nan'"),
    (["demo", "--batch-size", "1e3"], "argument --batch-size: expected a whole number, got '1e3'"),
    (["run", "intergroup", "--model", "m", "--out", "OUT", "--temperature", "warm"],
     "argument --temperature: expected a number, got 'warm'"),
    (["run", "intergroup", "--model", "m", "--out", "OUT", "--catgories", "religion"],
     "unrecognized arguments: --catgories religion; did you mean --categories?"),
    (["run", "intergroup", "--model", "m", "--out", "OUT", "--mode", "scroe"], "argument --mode: invalid choice"),
    (["run", "intergroup", "--categories", "religion"], "required: --model, --out"),
    (["interp", "patch", "RUN", "--equivalence-margn", "0.1"], "did you mean --equivalence-margin?"),
    (["interp", "patch", "RUN", "--batch-size", "many"], "argument --batch-size: expected a whole number"),
    (["sweep", "FILE", "--dry-rn"], "did you mean --dry-run?"),
])
def test_a_flag_argparse_refuses_is_one_line_naming_it(argv, named, tmp_path, capsys):
    argv = [tmp_path / a if a in ("OUT", "RUN", "FILE") else a for a in argv]
    _refused(capsys, argv, named, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_misspelt_flag_is_matched_to_the_commands_own_flags_only(tmp_path, capsys):
    line = _refused(capsys, ["demo", "--categories", "religion"], "unrecognized arguments: --categories", tmp_path)
    assert "did you mean" not in line  # --categories is run intergroup's, not the demo's


# --- 4: --device ---------------------------------------------------------------------------------------------------

ABSENT = [("split:99=1GB", "GPU 99 is not on this machine")]
if not torch.backends.mps.is_available():
    ABSENT.append(("split:mps=1GB", "mps is not on this machine"))
if torch.cuda.device_count() == 0:
    ABSENT.append(("split:0=1GB", "GPU 0 is not on this machine"))


@pytest.mark.parametrize("device, named", [
    ("split:cpu=1GB,cpu=2GB", "device cpu capped more than once"),
    ("split:0=1GB,cuda:0=2GB", "device 0, cuda:0 capped more than once"),
    *ABSENT,
])
def test_a_split_device_that_repeats_a_device_or_names_one_this_machine_lacks_is_refused(
        device, named, tiny_model_dir, tmp_path, capsys, no_model_load):
    line = _refused(capsys, _run(tiny_model_dir, tmp_path / "out", "--device", device), named, tmp_path)
    assert line.startswith(f"empathy-gap: error: --device is {device!r}: ") and not (tmp_path / "out").exists()


@pytest.mark.parametrize("cap", ["0", "0GiB"])
def test_a_split_cap_of_0_is_refused_asking_for_one_above_0(cap, tiny_model_dir, tmp_path, capsys, no_model_load):
    line = _refused(capsys, _run(tiny_model_dir, tmp_path / "out", "--device", f"split:cpu={cap}"), "above 0",
                    tmp_path)
    assert ">= 0" not in line and not (tmp_path / "out").exists()


# --- 5, 9: numbers of every command: a maximum, and finite ---------------------------------------------------------

@pytest.mark.parametrize("flags, named", [
    (["--limit-events", HUGE], "--limit-events must be at most"),
    (["--batch-size", 10 ** 20], "--batch-size must be at most"),
    (["--seed", 1208925819614629174706176], "--seed must be at most"),
    (["--seed", HUGE_SEED], "--seed must be at most 9223372036854775807"),
    (["--unit-size", HUGE], "--unit-size must be at most"),
    (["--max-new-tokens", HUGE], "--max-new-tokens must be at most"),
    (["--per-cell-samples", HUGE], "--per-cell-samples must be at most"),
    (["--mode", "generate", "--temperature", "1", "--samples", HUGE], "--samples must be at most"),
])
def test_a_run_flag_above_its_maximum_is_refused_before_the_model_loads(flags, named, tiny_model_dir, tmp_path,
                                                                        capsys, no_model_load):
    argv = _run(tiny_model_dir, tmp_path / "out", *flags)
    _refused(capsys, argv, named, tmp_path)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, named", [
    (["--limit-events", HUGE], "--limit-events must be at most"),
    (["--batch-size", 10 ** 20], "--batch-size must be at most"),
])
def test_a_demo_flag_above_its_maximum_is_refused_before_the_model_loads(flags, named, tmp_path, capsys,
                                                                         no_model_load):
    _refused(capsys, ["demo", "--out", tmp_path / "demo", "--no-progress", *flags], named, tmp_path)
    assert not (tmp_path / "demo").exists()


@pytest.mark.parametrize("argv, named", [
    (_study("steer", "RUN", "--split-seed", HUGE_SEED), "--split-seed must be at most 9223372036854775807"),
    (_study("steer", "RUN", "--in-sample", "--permutation-seed", -1), "--permutation-seed must be at least 0"),
    (_study("patch", "RUN", "--limit-events", "1", "--sweep-events", "0", "--batch-size", 10 ** 20),
     "--batch-size must be at most"),
    (_study("rsa", "RUN", "--seed", "-1"), "--seed must be at least 0"),
    (_study("clusters", "RUN", "--seed", HUGE_SEED), "--seed must be at most"),
    (["analyze", "RUN", "--permutations", "10", "--permutation-seed", HUGE_SEED],
     "--permutation-seed must be at most"),
])
def test_a_study_or_analysis_number_out_of_bounds_is_refused_before_anything_is_written(argv, named, pinned_run,
                                                                                        capsys):
    _refused(capsys, [pinned_run if a == "RUN" else a for a in argv], named, pinned_run)
    assert not (pinned_run / "interp").exists() and not (pinned_run / "analysis").exists()


def test_the_run_and_suite_settings_of_a_sweep_file_have_maximums(tiny_model_dir, tmp_path, capsys):
    path = tmp_path / "sweep.toml"
    path.write_text(_sweep_text(tmp_path, tiny_model_dir, "batch_size = 4294967296\nseed = 9223372036854775808",
                                "limit_events = 4294967296"))
    assert main(["sweep", str(path), "--dry-run", "--no-calibrate"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and all(line.startswith(f"empathy-gap: error: {path}: ") for line in lines), lines
    for named in ("run.batch_size must be at most", "run.seed must be at most",
                  "suite.intergroup.options.limit_events is 4294967296"):
        assert any(named in line for line in lines), lines
    assert not (tmp_path / "sweep").exists()


def _sweep_text(tmp_path: Path, model_dir: Path, run: str = "", options: str = "limit_events = 1",
                model: str = "") -> str:
    """A sweep file of one intergroup run of the tiny model, with lines added to [run], its options and its model."""
    return (f'out = "{tmp_path / "sweep"}"\n[run]\n{run}\n[[model]]\nname = "a"\nid = "{model_dir}"\n{model}\n'
            f'[suite.intergroup]\nmode = "score"\n'
            f'options = {{ categories = ["religion"], settings = ["P0S0T0"], {options} }}\n')


# --- scripts that build the options --------------------------------------------------------------------------------

@pytest.mark.parametrize("build, named", [
    (lambda: RunConfig("intergroup", "m", batch_size=10 ** 20).validate(get_suite("intergroup")), "--batch-size"),
    (lambda: RunConfig("intergroup", "m", seed=HUGE_SEED).validate(get_suite("intergroup")), "--seed"),
    (lambda: RunConfig("intergroup", "m", seed=math.nan).validate(get_suite("intergroup")), "--seed"),
    (lambda: steering.Options(coefs=(math.nan,)), "--coef"),
    (lambda: steering.Options(coefs=(1.0, math.inf)), "--coef"),
    (lambda: steering.Options(split_seed=-1), "--split-seed"),
    (lambda: patching.Options(equivalence_margin=math.nan), "--equivalence-margin"),
    (lambda: patching.Options(limit_events=HUGE), "--limit-events"),
    (lambda: patching.Options(device="split:cpu=0"), "--device"),
    (lambda: probes.Options(C=math.inf), "--C"),
    (lambda: intergroup.Options(limit_events=HUGE), "--limit-events"),
    (lambda: intergroup.AnalyzeOptions(permutations=HUGE), "--permutations"),
    (lambda: isear.AnalyzeOptions(bootstrap_cycles=HUGE), "--bootstrap-cycles"),
])
def test_a_script_that_builds_the_options_gets_a_value_error_naming_the_field(build, named):
    with pytest.raises(ValueError, match=f"^{named} "):
        build()


def test_a_scripts_run_with_a_size_above_its_maximum_writes_nothing(tiny_model_dir, tmp_path, no_model_load):
    with pytest.raises(ValueError, match="^--batch-size must be at most"):
        run(RunConfig("intergroup", str(tiny_model_dir), options=intergroup.Options(limit_events=1), mode="score",
                      batch_size=10 ** 20), tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


# --- 6: a sweep file's encoding and emptiness ----------------------------------------------------------------------

@pytest.mark.parametrize("text", ["", "\n# nothing yet\n", "\ufeff"])
def test_an_empty_sweep_file_is_one_line_saying_so(text, tmp_path, capsys):
    path = tmp_path / "sweep.toml"
    path.write_text(text, encoding="utf-8")
    line = _refused(capsys, ["sweep", path, "--dry-run", "--no-calibrate"], f"{path}: the sweep file is empty",
                    tmp_path)
    assert "[[model]]" in line and "[suite.NAME]" in line


def test_a_sweep_file_with_a_byte_order_mark_is_read_as_without(tiny_model_dir, tmp_path, capsys):
    path = tmp_path / "sweep.toml"
    path.write_text(_sweep_text(tmp_path, tiny_model_dir), encoding="utf-8")
    assert main(["sweep", str(path), "--dry-run", "--no-calibrate"]) == 0
    plain = capsys.readouterr().out
    path.write_text("\ufeff" + _sweep_text(tmp_path, tiny_model_dir), encoding="utf-8")
    assert main(["sweep", str(path), "--dry-run", "--no-calibrate"]) == 0
    assert capsys.readouterr().out == plain and not (tmp_path / "sweep").exists()


# --- 7: an output folder among a run directory's own files ---------------------------------------------------------

@pytest.mark.parametrize("argv, inside", [
    (["analyze", "RUN", "--permutations", "10", "--out", "OUT"], "results/x"),
    (["analyze", "RUN", "--permutations", "10", "--out", "OUT"], "activations"),
    (["analyze", "RUN", "--permutations", "10", "--out", "OUT"], "notes"),
    (_study("patch", "RUN", "--limit-events", "1", "--sweep-events", "0", "--out", "OUT"), "results/patch"),
])
def test_an_output_folder_inside_a_run_directorys_own_files_is_refused(argv, inside, pinned_run, capsys):
    out = pinned_run / inside
    argv = [pinned_run if a == "RUN" else out if a == "OUT" else a for a in argv]
    line = _refused(capsys, argv, f"--out {out}: is inside the run directory", pinned_run)
    assert "analysis/ or interp/" in line and not (pinned_run / "notes").exists()


# --- 8: the dry run refuses remote code as the run does ------------------------------------------------------------

def test_a_dry_run_without_calibration_refuses_remote_code_the_file_asks_for(tiny_model_dir, tmp_path, capsys):
    path = tmp_path / "sweep.toml"
    path.write_text(_sweep_text(tmp_path, tiny_model_dir, model="trust_remote_code = true"))
    _refused(capsys, ["sweep", path, "--dry-run", "--no-calibrate"], "pass --trust-remote-code to allow it",
             tmp_path)
    assert main(["sweep", str(path), "--dry-run", "--no-calibrate", "--trust-remote-code"]) == 0
