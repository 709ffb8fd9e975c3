"""A sweep's TOML file read into its runs: models × suites × settings, each an ordinary RunConfig with a predictable
run directory, every key and value checked (the suites' typed Options, RunConfig's fields) before anything runs."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import tomllib
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple, TypeVar

from behavioral.core.files import FOLDER_NAME, read_regular
from behavioral.inference.model_source import check_length, resolve_source
from behavioral.core.options import fits, from_mapping, quoted, type_name
from behavioral.suite.registry import get_declaration, names
from behavioral.sweep.analysis_table import checked
from behavioral.runner.config import RunConfig, check_setting
from behavioral.runner.settings import sweep_keys
from behavioral.inference.vllm.args import PARALLEL

T = TypeVar("T")
SWEEP_FILE_LIMIT = 2 ** 20  # the most bytes a sweep file may hold (a thousand runs' tables fit in a tenth)
RUNS_DIR = "runs"
NAME = FOLDER_NAME
# The run settings each table may give, from RunConfig's declarations: every run's ([run]), a model's (beside its id,
# name and vLLM's engine arguments), a suite's or setting's (beside its options, capture and analysis tables), and
# a capture table's (its key -> the setting).
RUN_KEYS = frozenset(sweep_keys(RunConfig, "run"))
MODEL_KEYS = frozenset({"id", "name", "vllm", *PARALLEL, *sweep_keys(RunConfig, "model")})
SUITE_KEYS = frozenset({*sweep_keys(RunConfig, "suite"), "options", "capture", "analysis"})
CAPTURE_KEYS = sweep_keys(RunConfig, "capture")
TOP_KEYS = ("out", "run", "model", "suite")
FOLDER_RULE = "letters, digits, '.', '_' or '-', at most 64 (a folder name)"


@dataclass(frozen=True)
class SweepModel:
    """One model of the sweep: its folder name in the sweep, the model argument (hub id, folder, .gguf or the
    embedded alias) and whether loading it runs the model's own code (its other loading settings, the same in
    each of its runs' RunConfig, are read from there)."""

    name: str
    spec: str
    trust_remote_code: bool


@dataclass(frozen=True)
class SweepRun:
    """One run of the sweep: model × suite × setting, its run directory inside the sweep, its RunConfig and the
    options its suite setting's analysis takes (the values the file gives, as the suite's AnalyzeOptions hold them)."""

    model: SweepModel
    suite: str
    setting: str  # "" where the suite gives no settings
    config: RunConfig
    analysis: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        """model/suite or model/suite--setting: the run's directory under runs/ and its name in tables."""
        return run_name(self.model.name, self.suite, self.setting)

    @property
    def label(self) -> str:
        """suite or suite--setting: what the runs of one analysis share."""
        return setting_label(self.suite, self.setting)

    @property
    def run_dir(self) -> PurePosixPath:
        """The run directory relative to the sweep's folder."""
        return run_path(self.model.name, self.suite, self.setting)


def setting_label(suite: str, setting: str) -> str:
    """suite or suite--setting: a suite setting's folder name in the analysis and its label in tables."""
    return f"{suite}--{setting}" if setting else suite


def run_name(model: str, suite: str, setting: str) -> str:
    """model/suite[--setting]: a run's name in tables and in sweep.json."""
    return f"{model}/{setting_label(suite, setting)}"


def run_path(model: str, suite: str, setting: str) -> PurePosixPath:
    """runs/model/suite[--setting]: a run's directory relative to the sweep's folder, made only from checked names."""
    return PurePosixPath(RUNS_DIR, model, setting_label(suite, setting))


@dataclass(frozen=True)
class Sweep:
    """A sweep read from its TOML file: where its folder is, its models and runs (model-major order), the file's
    sha256 and its data as read (recorded in sweep.json)."""

    source: Path
    out: Path
    models: tuple[SweepModel, ...]
    runs: tuple[SweepRun, ...]
    sha256: str
    data: dict[str, Any]


class Given(NamedTuple):
    """A run setting's value as the file gives it, and its key there (run.mode, suite.jaem.capture.layers)."""

    value: Any
    key: str


def _attempt(problems: list[str], read: Callable[[], T]) -> T | None:
    """`read()`, or None with its ValueError added to `problems`."""
    try:
        return read()
    except ValueError as err:
        problems.append(str(err))
        return None


def _table(value: Any, where: str) -> dict[str, Any]:
    """`value` as a table, or a ValueError naming `where`."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} is {quoted(value)}; expected a table")
    return dict(value)


def _known(table: Mapping[str, Any], allowed, where: str, problems: list[str]) -> None:
    """Add to `problems` each key of `table` that is not allowed there."""
    problems += [f"{where}.{key} is not a sweep key here; expected some of {', '.join(sorted(allowed))}"
                 for key in table if key not in allowed]


def _given(table: Mapping[str, Any], fields, where: str, problems: list[str]) -> dict[str, Given]:
    """The run settings `table` gives (its keys among `fields`, RunConfig's), each named by its key; a value of the
    wrong type (left out) or one RunConfig refuses (kept, as written) is added to `problems`."""
    hints = typing.get_type_hints(RunConfig)
    given = {}
    for key in [k for k in table if k in fields]:
        name, value = f"{where}.{key}", table[key]
        if not fits(value, hints[key]):
            problems.append(f"{name} is {quoted(value)}; expected {type_name(hints[key])}")
            continue
        try:
            check_setting(key, value, name)
        except ValueError as err:
            problems.append(str(err))
        given[key] = Given(value, name)
    return given


def _capture(table: Mapping[str, Any], where: str, problems: list[str]) -> dict[str, Given]:
    """The capture block of a suite's or setting's table as RunConfig's capture, layers and per_cell_samples (none
    without a block)."""
    where = f"{where}.capture"
    block = _attempt(problems, lambda: _table(table["capture"], where)) if "capture" in table else None
    if block is None:
        return {}
    _known(block, CAPTURE_KEYS, where, problems)
    kinds = block.get("kinds", [])
    if kinds != "all" and not fits(kinds, tuple[str, ...]):
        problems.append(f"{where}.kinds is {quoted(kinds)}; expected a list of capture kinds or \"all\"")
        kinds = []
    return {"capture": Given(kinds, f"{where}.kinds")} | _given(block, CAPTURE_KEYS.keys() - {"kinds"}, where, problems)


def _model(table: Any, index: int, run: dict[str, Given],
           problems: list[str]) -> tuple[SweepModel, dict[str, Given]] | None:
    """A [[model]] table as its SweepModel and the run settings it gives its runs (its id as their model); None where
    it is refused, each reason added to `problems`."""
    where = f"model[{index}]"
    table = _attempt(problems, lambda: _table(table, where))
    if table is None:
        return None
    _known(table, MODEL_KEYS, where, problems)
    own = _given(table, MODEL_KEYS & RUN_KEYS, where, problems)
    wrong: list[str] = []
    spec = _attempt(wrong, lambda: _model_id(table.get("id"), where))
    name = _attempt(wrong, lambda: _model_name(table.get("name", _default_name(spec or "")), where))
    trust = table.get("trust_remote_code", False)
    if not isinstance(trust, bool):
        wrong.append(f"{where}.trust_remote_code is {quoted(trust)}; expected true or false")
    backend = _backend(table, where, wrong)
    problems += wrong
    if wrong:
        return None
    own |= {"model": Given(spec, f"{where}.id"), "trust_remote_code": Given(trust, f"{where}.trust_remote_code"),
            **backend}
    return SweepModel(name, spec, trust), own


def _backend(table: Mapping[str, Any], where: str, problems: list[str]) -> dict[str, Given]:
    """A model table's backend and vLLM engine arguments (its parallel keys, then its vllm table) as run settings,
    checked with the run's other settings (RunConfig.problems)."""
    given = {"backend": Given(table["backend"], f"{where}.backend")} if "backend" in table else {}
    pairs = [(key, table[key]) for key in PARALLEL if key in table]
    if "vllm" in table:
        pairs += list((_attempt(problems, lambda: _table(table["vllm"], f"{where}.vllm")) or {}).items())
    return given | ({"vllm_args": Given(tuple(pairs), f"{where}.vllm")} if pairs else {})


def _model_id(spec: Any, where: str) -> str:
    """A model table's id: a hub id or path of a length either may have, naming a local model that exists."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"{where}.id is {quoted(spec)}; expected the model: a hub id, a local folder, a .gguf file "
                         "or smollm2-135m")
    check_length(spec, f"{where}.id")
    try:
        resolve_source(spec)  # a missing local folder or file is named now, not after other models ran
    except ValueError as err:
        raise ValueError(f"{where}.id: {err}") from None
    return spec


def _model_name(name: Any, where: str) -> str:
    """A model's name in the sweep: one folder name."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"{where}.name is {quoted(name)}; expected {FOLDER_RULE}")
    return name


def _default_name(spec: str) -> str:
    """A model's folder name from its argument: the last part of a hub id or path, without .gguf, as much of it as a
    folder name holds."""
    text = re.sub(r"[^A-Za-z0-9._-]", "-", PurePosixPath(spec.rstrip("/")).name.removesuffix(".gguf"))
    found = NAME.search(text)
    return found.group() if found else "model"


def _settings(suite: str, table: dict[str, Any], problems: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(name, own table) of each [suite.X.settings.NAME] of a suite's table, or one unnamed setting with no keys of
    its own; a setting with a bad name or table is added to `problems` and left out."""
    if "settings" not in table:
        return [("", {})]
    where = f"suite.{suite}.settings"
    named = _table(table["settings"], where)
    if not named:
        raise ValueError(f"{where} is empty; expected one table per setting, or no settings key")
    out = []
    for name, setting in named.items():
        if not NAME.fullmatch(name):
            problems.append(f"{where} has a setting named {quoted(name)}; expected {FOLDER_RULE}")
        elif (own := _attempt(problems, functools.partial(_table, setting, f"{where}.{name}"))) is not None:
            _known(own, SUITE_KEYS, f"{where}.{name}", problems)
            out.append((name, own))
    return out


def _options(suite: str, table: dict[str, Any], own: dict[str, Any], at: str) -> Any:
    """A setting's suite options: the suite's options table, key by key replaced by the setting's."""
    given = _table(table.get("options", {}), f"suite.{suite}.options") | _table(own.get("options", {}), f"{at}.options")
    spec = get_declaration(suite)
    if spec.Options is None:
        if given:
            raise ValueError(f"{at}.options: suite {suite!r} takes no options")
        return None
    return from_mapping(spec.Options, given, f"{at}.options", f"suite {suite!r}")


def _analysis(suite: str, table: dict[str, Any], own: dict[str, Any], at: str) -> dict[str, Any]:
    """A setting's analysis options: the suite's analysis table, key by key replaced by the setting's, each checked
    where it was written (analysis_table.checked)."""
    where = f"suite.{suite}.analysis"
    values = checked(suite, _table(table.get("analysis", {}), where), where)
    if "analysis" in own:
        values = checked(suite, values | _table(own["analysis"], f"{at}.analysis"), f"{at}.analysis")
    return values


def _runs_of(suite: str, table: Any, run: dict[str, Given], models: list[tuple[SweepModel, dict[str, Given]]],
             problems: list[str]) -> list[SweepRun]:
    """Every model's runs of one suite table; each setting's values are [run]'s, replaced by the suite's, the
    setting's (a capture block as a whole) and the model's."""
    where = f"suite.{suite}"
    if suite not in names():
        raise ValueError(f"{where}: unknown suite {quoted(suite)}; expected one of {', '.join(names())}")
    table = _table(table, where)
    _known(table, SUITE_KEYS | {"settings"}, where, problems)
    base = run | _given(table, SUITE_KEYS & RUN_KEYS, where, problems) | _capture(table, where, problems)
    runs = []
    for setting, own in _settings(suite, table, problems):
        at = f"{where}.settings.{setting}" if setting else where
        given = base | _given(own, SUITE_KEYS & RUN_KEYS, at, problems)
        if "capture" in own:
            given = {k: g for k, g in given.items() if k not in CAPTURE_KEYS.values()} | _capture(own, at, problems)
        analysis = _attempt(problems, functools.partial(_analysis, suite, table, own, at))
        try:
            options = _options(suite, table, own, at)
        except ValueError as err:
            problems.append(str(err))
            continue
        runs += [SweepRun(model, suite, setting, _config(suite, options, given | values, at, problems), analysis or {})
                 for model, values in models]
    return runs


def _config(suite: str, options: Any, given: dict[str, Given], at: str, problems: list[str]) -> RunConfig:
    """The RunConfig of one run, whose problems (RunConfig.problems, the checks `empathy-gap run` makes of its flags)
    are added to `problems` naming each value where it was written (one not written: its key in `at`)."""
    spec = get_declaration(suite)
    values = {k: g.value for k, g in given.items()}
    kinds = values.get("capture", ())
    if kinds == "all":
        kinds = spec.capture.kinds if spec.capture else ()
    config = RunConfig(suite=suite, options=options, **(values | {"capture": tuple(kinds)}))
    keys = {k: g.key for k, g in given.items()}
    unwritten = {field: f"capture.{key}" for key, field in CAPTURE_KEYS.items()}
    problems += config.problems(spec, lambda field: keys.get(field, f"{at}.{unwritten.get(field, field)}"))
    return config


def read_sweep(path: str | Path, out: str | Path | None = None) -> Sweep:
    """The sweep a TOML file describes (its folder: `out`, else the file's `out` key, relative to the current
    directory). Every unknown key, ill-typed or refused value, unknown suite or option, missing local model or
    repeated name is a line of one ValueError, naming the file and the key where the value was written.

    >>> from pathlib import Path
    >>> from behavioral import read_sweep
    >>> _ = Path("sweep.toml").write_text('''out = "sweep"
    ... [run]
    ... dtype = "fp32"
    ... [[model]]
    ... name = "smol"
    ... id = "smollm2-135m"
    ... [suite.intergroup]
    ... mode = "score"
    ... options = { categories = ["religion"], settings = ["P0S1T0"], limit_events = 1 }
    ... ''')
    >>> sweep = read_sweep("sweep.toml")
    >>> [r.name for r in sweep.runs]
    ['smol/intergroup']
    """
    path = Path(path)
    try:
        raw = read_regular(path, "a sweep file (TOML)", limit=SWEEP_FILE_LIMIT, follow=True)  # a FIFO never hangs
        data = tomllib.loads(raw.decode("utf-8-sig"))  # an editor's byte-order mark is no TOML statement
    except FileNotFoundError:
        raise ValueError(f"{path}: no such sweep file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not valid TOML ({err})") from None
    if not data:
        raise ValueError(f"{path}: the sweep file is empty (no keys); expected an out key (or --out), one or more "
                         "[[model]] tables with an id and one or more [suite.NAME] tables")
    try:
        return _sweep(path, data, out, hashlib.sha256(raw).hexdigest())
    except ValueError as err:
        raise ValueError("\n".join(f"{path}: {line}" for line in str(err).splitlines())) from None


def _sweep(path: Path, data: dict[str, Any], out: str | Path | None, sha256: str) -> Sweep:
    """The sweep of a TOML file's data, or one ValueError with a line per problem found in it."""
    problems: list[str] = []
    _known(data, TOP_KEYS, "the file", problems)
    folder = _attempt(problems, lambda: _folder(data, out))
    run_table = _attempt(problems, lambda: _table(data.get("run", {}), "run")) or {}
    _known(run_table, RUN_KEYS, "run", problems)
    run = _given(run_table, RUN_KEYS, "run", problems)
    tables = data.get("model")
    if not isinstance(tables, list) or not tables:
        problems.append("model is missing; expected one or more [[model]] tables, each with an id")
        tables = []
    models = [m for i, t in enumerate(tables) if (m := _model(t, i, run, problems)) is not None]
    _attempt(problems, lambda: _unique([m.name for m, _ in models], "model names (set name = \"...\" to tell them "
                                                                    "apart)"))
    runs = []
    for suite, table in (_attempt(problems, lambda: _suites(data)) or {}).items():
        runs += _attempt(problems, functools.partial(_runs_of, suite, table, run, models, problems)) or []
    if problems:
        raise ValueError("\n".join(dict.fromkeys(problems)))
    order = [m.name for m, _ in models]
    runs.sort(key=lambda r: order.index(r.model.name))  # model-major: each model loaded once
    return Sweep(path, folder, tuple(m for m, _ in models), tuple(runs), sha256, data)


def _folder(data: dict[str, Any], out: str | Path | None) -> Path:
    """The sweep's folder: `out` (--out), else the file's out key."""
    if out is not None:
        return Path(out)
    if not isinstance(data.get("out"), str) or not data["out"]:
        raise ValueError(f"out is {quoted(data.get('out'))}; expected the sweep's folder (or pass --out)")
    return Path(data["out"])


def _suites(data: dict[str, Any]) -> dict[str, Any]:
    """The file's suite tables, at least one."""
    suites = _table(data.get("suite", {}), "suite")
    if not suites:
        raise ValueError(f"suite is missing; expected one or more [suite.NAME] tables (NAME: {', '.join(names())})")
    return suites


def _unique(values: list[str], what: str) -> None:
    seen = {v for v in values if values.count(v) > 1}
    if seen:
        raise ValueError(f"{what}: {', '.join(sorted(seen))} given more than once")


def settings_record(run: SweepRun) -> dict[str, Any]:
    """What sweep.json records of a run: its name, model, suite, setting, options and its analysis options (its
    directory follows from the names)."""
    return {"name": run.name, "model": run.model.name, "model_spec": run.model.spec, "suite": run.suite,
            "setting": run.setting,
            "options": None if run.config.options is None else dataclasses.asdict(run.config.options),
            "analysis": dict(run.analysis)}


def check_trust(sweep: Sweep, allowed: bool) -> None:
    """Refuse a sweep whose model tables ask for remote code unless the user's own flag (`allowed`) says so."""
    asking = [m.name for m in sweep.models if m.trust_remote_code]
    if asking and not allowed:
        raise ValueError(f"{sweep.source}: model {', '.join(asking)} sets trust_remote_code = true, which runs code "
                         "from the model's folder or hub repository; pass --trust-remote-code to allow it")
