"""Chat rendering: system-role detection, the system-in-user fallback, slot offsets after folding."""

from __future__ import annotations

import copy
import json

import pytest

from behavioral.rundir.manifest import MANIFEST
from behavioral.inference import chat
from behavioral.runner.run import RunConfig, run
from behavioral.suites.intergroup import Options, prompts
from behavioral.rundir.parts import read_results
from tests.conftest import NO_SYSTEM
from tests.tiny_tokenizer import CHATML

# A template that never fails but silently leaves system messages out (as some real templates do).
DROP_SYSTEM = (
    "{% for m in messages %}{% if m['role'] != 'system' %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _with_template(tokenizer, template):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = template
    return tok


@pytest.fixture(scope="module")
def no_system_tokenizer(tiny_tokenizer):
    return _with_template(tiny_tokenizer, NO_SYSTEM)


def _probe(setting="P0S0T0", perceiver="a person from Canada", experiencer="a person"):
    return prompts.build(setting, perceiver, experiencer, "joy", "I won a prize.")


def test_detect_format_system_for_chatml(tiny_tokenizer):
    assert tiny_tokenizer.chat_template == CHATML
    assert chat.detect_format(tiny_tokenizer) == chat.SYSTEM == "system"


def test_detect_format_falls_back_when_template_raises_on_system(no_system_tokenizer):
    with pytest.raises(Exception, match="System role not supported"):
        no_system_tokenizer.apply_chat_template(_probe().messages, tokenize=False)
    assert chat.detect_format(no_system_tokenizer) == chat.FOLDED == "system-in-user"


def test_detect_format_falls_back_when_template_drops_system(tiny_tokenizer):
    tok = _with_template(tiny_tokenizer, DROP_SYSTEM)
    probe = _probe()
    rendered = tok.apply_chat_template(list(probe.messages), tokenize=False, add_generation_prompt=True)
    assert probe.messages[0]["content"] not in rendered  # the template really drops it without complaint
    assert chat.detect_format(tok) == chat.FOLDED


def test_render_system_format_keeps_two_turns(tiny_tokenizer):
    prompt = _probe()
    text, rendered = chat.render(tiny_tokenizer, prompt, chat.SYSTEM)
    assert rendered is prompt
    system, user = prompt.messages[0]["content"], prompt.messages[1]["content"]
    assert text == (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
                    "<|im_start|>assistant\n")


@pytest.mark.parametrize("template", [NO_SYSTEM, DROP_SYSTEM])
def test_render_fallback_gives_one_user_turn(tiny_tokenizer, template):
    tok = _with_template(tiny_tokenizer, template)
    prompt = _probe("P2S0T0")
    system, user = prompt.messages[0]["content"], prompt.messages[1]["content"]
    text, rendered = chat.render(tok, prompt, chat.detect_format(tok))
    assert len(rendered.messages) == 1
    assert rendered.messages[0]["role"] == "user"
    assert rendered.messages[0]["content"] == system + "\n\n" + user
    assert rendered.messages[0]["content"].startswith(system + "\n\n")
    if template == NO_SYSTEM:
        assert text == f"<start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n<start_of_turn>model\n"
        assert text.count("<start_of_turn>user") == 1
    else:
        assert text == f"<|im_start|>user\n{system}\n\n{user}<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("setting", ["P0S0T0", "P3S0T0", "P0S1T0", "P0S0T1", "P0S0T2"])
@pytest.mark.parametrize("perceiver, experiencer", [
    ("a person from Canada", "a person"),
    ("a person", "a person from the United Kingdom"),
    ("a Latinx", "a Latinx"),
])
def test_fold_system_moves_slots_with_the_text(setting, perceiver, experiencer):
    prompt = prompts.build(setting, perceiver, experiencer, "fear", "a person from Canada scared a person.")
    folded = chat.fold_system(prompt)
    content = folded.messages[0]["content"]
    assert [s.name for s in folded.slots] == ["perceiver", "experiencer"]
    identity = {"perceiver": perceiver, "experiencer": experiencer}
    for slot, original in zip(folded.slots, prompt.slots):
        assert slot.message == 0
        assert content[slot.start:slot.end] == identity[slot.name]
        assert slot.end - slot.start == original.end - original.start
    shift = len(prompt.messages[0]["content"]) + 2
    assert folded.slots[0].start == prompt.slots[0].start
    assert folded.slots[1].start == prompt.slots[1].start + shift


def test_no_chat_template_is_an_error_naming_the_tokenizer(tiny_tokenizer, tmp_path):
    from transformers import AutoTokenizer

    folder = tmp_path / "base-model-without-template"
    _with_template(tiny_tokenizer, None).save_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    assert tok.chat_template is None
    with pytest.raises(chat.ChatTemplateError) as err:
        chat.detect_format(tok, "chat")
    assert str(folder) in str(err.value)
    assert "chat template" in str(err.value) and "--prompt-format plain" in str(err.value)
    assert isinstance(err.value, ValueError)  # so the CLI reports it as bad input
    assert chat.detect_format(tok) == chat.detect_format(tok, "plain") == chat.PLAIN  # auto: a base model


def test_plain_format_joins_the_messages_and_moves_the_slots(tiny_tokenizer):
    prompt = _probe("P0S0T1", "a Latinx", "a person from Canada")
    text, rendered = chat.render(tiny_tokenizer, prompt, chat.PLAIN)
    system, user = prompt.messages[0]["content"], prompt.messages[1]["content"]
    assert text == system + "\n\n" + user and "<|im_start|>" not in text
    assert [rendered.text(s) for s in rendered.slots] == ["a Latinx", "a person from Canada"]
    assert chat.encode(tiny_tokenizer, prompt, chat.PLAIN) == tiny_tokenizer(text).input_ids
    assert chat.detect_format(tiny_tokenizer, "plain") == chat.PLAIN
    with pytest.raises(chat.ChatTemplateError, match="--prompt-format 'html'"):
        chat.detect_format(tiny_tokenizer, "html")


def test_suite_run_records_fallback_format(tiny_model, tiny_tokenizer, tmp_path):
    model_dir = tmp_path / "tiny-no-system"
    tiny_model.save_pretrained(model_dir)
    _with_template(tiny_tokenizer, NO_SYSTEM).save_pretrained(model_dir)
    options = Options(categories=("religion",), settings=("P0S0T0",), limit_events=1)
    config = RunConfig(suite="intergroup", model=str(model_dir), options=options, mode="score", device="cpu",
                       dtype="fp32", batch_size=8, unit_size=1)
    out = run(config, tmp_path / "run", progress=False)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["config"]["chat_format"] == "system-in-user"
    rows = read_results(out)
    assert len(rows) == 36
    assert rows["expected"].between(0, 100).all()
