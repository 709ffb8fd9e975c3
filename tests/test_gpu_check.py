"""The GPU check rehearsed on CPU: the tiny random model, small counts; every field written, nulls with reasons."""

from __future__ import annotations

import json

import pytest

from tests.benchmarks import gpu_check

SMALL = ["--device", "cpu", "--shapes", "tiny", "--prompts", "8", "--batch-size", "8", "--batch-sizes", "4,8",
         "--scaling-prompts", "16", "--capture-events", "1", "--max-new-tokens", "2", "--suite-new-tokens", "2",
         "--matmul-size", "256"]
PATHS = (("engine", "baseline"), ("engine", "generate"), ("score", "score_s0"), ("score", "score_s0_full"),
         ("score", "score_s1"), ("score", "both"))
POSITIVE = ("prompts_per_s", "prompt_tokens_per_s", "mfu", "tokens_per_unique_token", "seconds")


def _leaves(data, where=""):
    """(path, key, value, parent) of every non-dict value."""
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{where}{key}.")
        else:
            yield where, key, value, data


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "check"
    assert gpu_check.main([*SMALL, "--out", str(out)]) == 0
    return out, json.loads((out / "gpu_check.json").read_text())


def test_every_path_has_positive_figures_and_nulls_carry_reasons(result):
    _, data = result
    for section, path in PATHS:
        figures = data["sections"][section][path]
        for key in POSITIVE:
            assert figures[key] > 0, (section, path, key)
        assert figures["peak_memory_gib"] is None and "CUDA" in figures["peak_memory_gib_reason"]
    for where, key, value, parent in _leaves(data["sections"]):
        if value is None:
            assert isinstance(parent.get(f"{key}_reason"), str) and parent[f"{key}_reason"], where + key
    assert data["matmul_peak"]["flops"] > 0 and data["matmul_peak"]["size"] == 256
    assert "trained" in data["model"]["tokenizer"]
    assert [t["measured"] is not None for t in data["targets"]] == [True] * len(gpu_check.TARGETS)


def test_sections_measure_what_they_name(result):
    _, data = result
    s = data["sections"]
    assert s["engine"]["generate"]["speedup"] > 0 and 0 <= s["engine"]["generate"]["first_token_agreement"] <= 1
    assert s["score"]["score_s0"]["tree_nodes"] > s["score"]["score_s1"]["tree_nodes"]
    assert s["score"]["score_s0_full"]["mean_nodes_read"] == s["score"]["score_s0"]["tree_nodes"]
    assert s["score"]["score_s0"]["mean_nodes_read"] <= s["score"]["score_s0"]["tree_nodes"]
    assert s["capture"]["capture"]["seconds"] > 0 and s["capture"]["run"]["prompts"] > 0
    assert s["capture"]["patched"]["row0_unchanged"] and s["capture"]["patched"]["rows_changed"] > 0
    assert set(s["scaling"]["batches"]) == {"generate_4", "score_4", "generate_8", "score_8"}
    assert s["scaling"]["oom"]["batch_size_after"] is None and "no GPU" in s["scaling"]["oom"]["batch_size_after_reason"]
    assert set(s["suites"]) == set(gpu_check.SUITE_RUNS)
    for name, run in s["suites"].items():
        assert run["rows"] == run["planned_rows"] > 0, name
        assert run["nothing_left_on_resume"] and run["lock_free_after"], name


def test_outputs_only_inside_out_and_listed(result):
    out, _ = result
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.json", "gpu_check.md", "manifest.json"]
    assert manifest["output"]["files"] == ["gpu_check.json", "gpu_check.md"]
    table = (out / "gpu_check.md").read_text()
    assert "| engine generate |" in table and "## Null figures" in table and "## Suite runs" in table


@pytest.mark.parametrize("argv, needle", [
    (["--shapes", "huge"], "invalid choice"),
    (["--tokenizer", "/nonexistent/tokenizer"], "no such folder"),
    (["--device", "cuda:7"], "CUDA is not available"),
    (["--out", "{tmp}/theirs"], "notes.txt"),
    (["--out", "{tmp}/theirs/notes.txt"], "not a folder"),
])
def test_bad_input_is_one_line_and_exit_2(argv, needle, tmp_path, capsys):
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_text("keep me")
    argv = [a.format(tmp=tmp_path) for a in argv]
    assert gpu_check.main([*SMALL, "--out", str(tmp_path / "new"), *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["notes.txt", "theirs"]
    assert (tmp_path / "theirs" / "notes.txt").read_text() == "keep me"
