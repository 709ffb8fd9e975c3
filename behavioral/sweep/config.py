"""A sweep's TOML file read into its runs: models × suites × settings, each an ordinary RunConfig with a predictable
run directory, every key and value checked (the suites' typed Options, RunConfig's fields) before anything runs."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from behavioral.files import FOLDER_NAME
from behavioral.models import DTYPES, check_device, resolve_source
from behavioral.options import fits, from_mapping, type_name
from behavioral.registry import get_suite, names
from behavioral.run import RunConfig

RUNS_DIR = "runs"
NAME = FOLDER_NAME
# The run settings each table may give (RunConfig's fields): every run's ([run]), a model's, a suite's or setting's.
RUN_KEYS = frozenset({"mode", "seed", "temperature", "top_p", "samples", "max_new_tokens", "prompt_format", "device",
                      "dtype", "batch_size", "unit_size", "store_probs"})
MODEL_KEYS = frozenset({"id", "name", "dtype", "device", "prompt_format", "batch_size", "trust_remote_code"})
SUITE_KEYS = (RUN_KEYS - {"device", "dtype"}) | {"options", "capture"}
CAPTURE_KEYS = {"kinds": "capture", "layers": "layers", "per_cell_samples": "per_cell_samples"}
TOP_KEYS = ("out", "run", "model", "suite")


@dataclass(frozen=True)
class SweepModel:
    """One model of the sweep: its folder name in the sweep, the model argument (hub id, folder, .gguf or the
    embedded alias) and what loading it needs."""

    name: str
    spec: str
    device: str
    dtype: str
    trust_remote_code: bool


@dataclass(frozen=True)
class SweepRun:
    """One run of the sweep: model × suite × setting, its run directory inside the sweep and its RunConfig."""

    model: SweepModel
    suite: str
    setting: str  # "" where the suite gives no settings
    config: RunConfig

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


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} is {value!r}; expected a table")
    return dict(value)


def _known(table: Mapping[str, Any], allowed, where: str) -> None:
    """A ValueError naming the first key of `table` that is not allowed there."""
    for key in table:
        if key not in allowed:
            raise ValueError(f"{where}.{key} is not a sweep key here; expected some of {', '.join(sorted(allowed))}")


def _typed(values: dict[str, Any], where: str) -> dict[str, Any]:
    """`values` of RunConfig's fields, each checked against the field's annotation."""
    hints = typing.get_type_hints(RunConfig)
    for key, value in values.items():
        if not fits(value, hints[key]):
            raise ValueError(f"{where}.{key} is {value!r}; expected {type_name(hints[key])}")
    return values


def _run_values(table: Mapping[str, Any], allowed, where: str) -> dict[str, Any]:
    """The run settings of a table (those `allowed` there), each of RunConfig's type."""
    return _typed({k: v for k, v in table.items() if k in RUN_KEYS and k in allowed}, where)


def _capture(table: Any, where: str) -> dict[str, Any]:
    """A capture block as RunConfig's capture, layers and per_cell_samples."""
    table = _table(table, where)
    _known(table, CAPTURE_KEYS, where)
    kinds = table.get("kinds", [])
    if kinds != "all" and not fits(kinds, tuple[str, ...]):
        raise ValueError(f"{where}.kinds is {kinds!r}; expected a list of capture kinds or \"all\"")
    values = _typed({CAPTURE_KEYS[k]: v for k, v in table.items() if k != "kinds"}, where)
    return {"capture": kinds} | values


def _model(table: Any, index: int, run: dict[str, Any]) -> SweepModel:
    where = f"model[{index}]"
    table = _table(table, where)
    _known(table, MODEL_KEYS, where)
    if not isinstance(table.get("id"), str) or not table["id"]:
        raise ValueError(f"{where}.id is {table.get('id')!r}; expected the model: a hub id, a local folder, a .gguf "
                         "file or smollm2-135m")
    try:
        resolve_source(table["id"])  # a missing local folder or file is named now, not after other models ran
    except ValueError as err:
        raise ValueError(f"{where}.id: {err}") from None
    name = table.get("name", _default_name(table["id"]))
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"{where}.name is {name!r}; expected letters, digits, '.', '_' or '-' (a folder name)")
    trust = table.get("trust_remote_code", False)
    if not isinstance(trust, bool):
        raise ValueError(f"{where}.trust_remote_code is {trust!r}; expected true or false")
    settings = {"device": "auto", "dtype": "auto"} | run | _run_values(table, MODEL_KEYS, where)
    if settings["dtype"] not in ("auto", *DTYPES):
        raise ValueError(f"{where}.dtype is {settings['dtype']!r}; expected auto, {', '.join(DTYPES)}")
    check_device(settings["device"])
    return SweepModel(name, table["id"], settings["device"], settings["dtype"], trust)


def _default_name(spec: str) -> str:
    """A model's folder name from its argument: the last part of a hub id or path, without .gguf."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", PurePosixPath(spec.rstrip("/")).name.removesuffix(".gguf")) or "model"


def _settings(suite: str, table: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(setting name, merged table) of a suite's table: one unnamed setting, or one per [suite.X.settings.NAME]
    whose keys replace the suite's (options merged key by key)."""
    named = table.pop("settings", None)
    if named is None:
        return [("", table)]
    named = _table(named, f"suite.{suite}.settings")
    if not named:
        raise ValueError(f"suite.{suite}.settings is empty; expected one table per setting, or no settings key")
    out = []
    for name, setting in named.items():
        where = f"suite.{suite}.settings.{name}"
        if not NAME.fullmatch(name):
            raise ValueError(f"{where}: the setting's name must be letters, digits, '.', '_' or '-' (a folder name)")
        setting = _table(setting, where)
        _known(setting, SUITE_KEYS, where)
        options = _table(table.get("options", {}), f"suite.{suite}.options") | \
            _table(setting.get("options", {}), f"{where}.options")
        out.append((name, table | setting | {"options": options}))
    return out


def _runs_of(suite: str, table: Any, run: dict[str, Any], models: tuple[SweepModel, ...],
             overrides: dict[str, dict[str, Any]]) -> list[SweepRun]:
    """Every model's runs of one suite table."""
    where = f"suite.{suite}"
    if suite not in names():
        raise ValueError(f"{where}: unknown suite {suite!r}; expected one of {', '.join(names())}")
    table = _table(table, where)
    _known(table, SUITE_KEYS | {"settings"}, where)
    runs = []
    for setting, merged in _settings(suite, table):
        at = f"{where}.settings.{setting}" if setting else where
        spec = get_suite(suite)
        options = from_mapping(spec.Options, _table(merged.get("options", {}), f"{at}.options"), f"{at}.options",
                               f"suite {suite!r}") if spec.Options is not None else None
        if spec.Options is None and merged.get("options"):
            raise ValueError(f"{at}.options: suite {suite!r} takes no options")
        values = run | _run_values(merged, SUITE_KEYS, at)
        if "capture" in merged:
            values |= _capture(merged["capture"], f"{at}.capture")
        for model in models:
            config = _config(suite, model, values | overrides[model.name], spec, options, at)
            runs.append(SweepRun(model, suite, setting, config))
    return runs


def _config(suite: str, model: SweepModel, values: dict[str, Any], spec, options, where: str) -> RunConfig:
    """The RunConfig of one run, checked as `empathy-gap run` checks its flags."""
    if values.get("capture") == "all":
        values["capture"] = spec.capture.kinds if spec.capture else ()
    values = values | {"capture": tuple(values.get("capture", ())), "device": model.device, "dtype": model.dtype}
    config = RunConfig(suite=suite, model=model.spec, options=options, trust_remote_code=model.trust_remote_code,
                       **values)
    try:
        config.validate(spec)
    except ValueError as err:
        raise ValueError(f"{where} (model {model.name}): {err}") from None
    return config


def read_sweep(path: str | Path, out: str | Path | None = None) -> Sweep:
    """The sweep a TOML file describes (its folder: `out`, else the file's `out` key, relative to the current
    directory); any unknown key, ill-typed value, unknown suite or option, missing local model or repeated name is
    one ValueError naming it."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        data = tomllib.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such sweep file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not valid TOML ({err})") from None
    try:
        return _sweep(path, data, out, hashlib.sha256(raw).hexdigest())
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def _sweep(path: Path, data: dict[str, Any], out: str | Path | None, sha256: str) -> Sweep:
    _known(data, TOP_KEYS, "the file")
    if out is None:
        if not isinstance(data.get("out"), str) or not data["out"]:
            raise ValueError(f"out is {data.get('out')!r}; expected the sweep's folder (or pass --out)")
        out = data["out"]
    run_table = _table(data.get("run", {}), "run")
    _known(run_table, RUN_KEYS, "run")
    run = _run_values(run_table, RUN_KEYS, "run")
    model_tables = data.get("model")
    if not isinstance(model_tables, list) or not model_tables:
        raise ValueError("model is missing; expected one or more [[model]] tables, each with an id")
    models = tuple(_model(t, i, {k: v for k, v in run.items() if k in ("device", "dtype")})
                   for i, t in enumerate(model_tables))
    _unique([m.name for m in models], "model names (set name = \"...\" to tell them apart)")
    overrides = {m.name: _run_values(t, MODEL_KEYS - {"device", "dtype"}, f"model[{i}]")
                 for i, (m, t) in enumerate(zip(models, model_tables))}
    suites = _table(data.get("suite", {}), "suite")
    if not suites:
        raise ValueError("suite is missing; expected one or more [suite.NAME] tables (NAME: "
                         f"{', '.join(names())})")
    runs = [r for suite, table in suites.items() for r in _runs_of(suite, table, run, models, overrides)]
    runs.sort(key=lambda r: [m.name for m in models].index(r.model.name))  # model-major: each model loaded once
    return Sweep(path, Path(out), models, tuple(runs), sha256, data)


def _unique(values: list[str], what: str) -> None:
    seen = {v for v in values if values.count(v) > 1}
    if seen:
        raise ValueError(f"{what}: {', '.join(sorted(seen))} given more than once")


def settings_record(run: SweepRun) -> dict[str, Any]:
    """What sweep.json records of a run: its name, model, suite, setting and options (its directory follows from
    the names)."""
    return {"name": run.name, "model": run.model.name, "model_spec": run.model.spec, "suite": run.suite,
            "setting": run.setting,
            "options": None if run.config.options is None else dataclasses.asdict(run.config.options)}


def check_trust(sweep: Sweep, allowed: bool) -> None:
    """Refuse a sweep whose model tables ask for remote code unless the user's own flag (`allowed`) says so."""
    asking = [m.name for m in sweep.models if m.trust_remote_code]
    if asking and not allowed:
        raise ValueError(f"{sweep.source}: model {', '.join(asking)} sets trust_remote_code = true, which runs code "
                         "from the model's folder or hub repository; pass --trust-remote-code to allow it")
