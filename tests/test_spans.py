"""Identity spans: char spans in rendered chat text, token spans via offset mappings, alignment for patching."""

from __future__ import annotations

import pytest

from activations.spans import SpanError, TokenSpan, align_from_end, char_spans, prompt_spans, token_spans
from behavioral.inference import chat
from behavioral.suites.intergroup import prompts
from behavioral.suites.intergroup.corpus import embedded_events
from behavioral.suites.intergroup.settings import SETTING_NAMES, get_setting
from tests.conftest import NO_SYSTEM, build_tiny_tokenizer

# A template that rewrites message text, so no message content appears verbatim in the rendered chat.
UPPER = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | upper }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

PAIRS = [
    ("a person from the United States", "a person from Iran"),
    ("a Muslim", "a Christian"),
    ("a White American", "a Black person"),
    ("a Jew", "a person"),
    ("a person from Canada", "a person"),
]


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2):
    return smollm2[1]


@pytest.fixture(scope="module", params=["tiny", pytest.param("smollm2", marks=pytest.mark.slow)])
def tokenizer(request):
    """The tests' tokenizer, and SmolLM2's (slow: it loads the real model, as every test naming `smollm2` does)."""
    if request.param == "tiny":
        return request.getfixturevalue("tiny_tokenizer")
    return request.getfixturevalue("smollm2_tokenizer")


@pytest.fixture(scope="module")
def no_system_tokenizer():
    return build_tiny_tokenizer(NO_SYSTEM)


def _narrative(setting: str, index: int = 0) -> tuple[str, str]:
    event = embedded_events()[index]
    return event.emotion, event.narrative(get_setting(setting).narrative_form)


def _build(setting, perceiver, experiencer, narrative=None):
    emotion, default = _narrative(setting)
    return prompts.build(setting, perceiver, experiencer, emotion, default if narrative is None else narrative)


def _assert_tight(tokenizer, ids, span: TokenSpan, identity: str):
    """The span's tokens decode to text holding `identity`, and neither end token can be dropped."""
    assert len(span) >= 1
    decoded = tokenizer.decode(ids[span.start : span.end])
    assert identity in decoded.lstrip(" ")
    assert identity not in tokenizer.decode(ids[span.start + 1 : span.end])
    assert identity not in tokenizer.decode(ids[span.start : span.end - 1])


def _offsets(tokenizer, text):
    return tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]


# --- char spans ----------------------------------------------------------------------------------------------------

def test_char_spans_point_at_identities_in_the_right_messages(tiny_tokenizer):
    prompt = _build("P0S0T0", "a person from Canada", "a person")
    text, rendered = chat.render(tiny_tokenizer, prompt, chat.SYSTEM)
    spans = char_spans(text, rendered)
    assert set(spans) == {"perceiver", "experiencer"}
    assert text[slice(*spans["perceiver"])] == "a person from Canada"
    assert text[slice(*spans["experiencer"])] == "a person"
    user_at = text.index(prompt.messages[1]["content"])
    assert spans["perceiver"][1] < user_at < spans["experiencer"][0]
    # the naive answer (first occurrence of "a person") would be inside the persona sentence
    assert text.index("a person") == spans["perceiver"][0]


def test_char_spans_raise_for_a_template_that_rewrites_text():
    tok = build_tiny_tokenizer(UPPER)
    prompt = _build("P0S0T0", "a Muslim", "a Christian")
    text, rendered = chat.render(tok, prompt, chat.SYSTEM)
    assert prompt.messages[0]["content"].upper() in text  # the template really rewrites the content
    with pytest.raises(SpanError, match=r"role 'system'.*verbatim"):
        char_spans(text, rendered)
    with pytest.raises(SpanError, match="verbatim"):
        prompt_spans(tok, prompt, chat.SYSTEM)


# --- token spans with the tiny tokenizer and the real SmolLM2 tokenizer --------------------------------------------

@pytest.mark.parametrize("setting", SETTING_NAMES)
def test_spans_hold_exactly_the_identity_tokens(tokenizer, setting):
    for perceiver, experiencer in PAIRS:
        prompt = _build(setting, perceiver, experiencer)
        ids, spans = prompt_spans(tokenizer, prompt, chat.SYSTEM)
        assert set(spans) == {"perceiver", "experiencer", "final"}
        assert spans["perceiver"].name == "perceiver" and spans["experiencer"].name == "experiencer"
        _assert_tight(tokenizer, ids, spans["perceiver"], perceiver)
        _assert_tight(tokenizer, ids, spans["experiencer"], experiencer)
        assert spans["perceiver"].end <= spans["experiencer"].start


def test_spans_cover_the_char_spans(tokenizer):
    prompt = _build("P2S0T0", "a person from the United States", "a Muslim")
    text, rendered = chat.render(tokenizer, prompt, chat.SYSTEM)
    ids, spans = prompt_spans(tokenizer, prompt, chat.SYSTEM)
    offsets = _offsets(tokenizer, text)
    chars = char_spans(text, rendered)
    for slot in ("perceiver", "experiencer"):
        lo, hi = chars[slot]
        span = spans[slot]
        assert offsets[span.start][0] <= lo < offsets[span.start][1]
        assert offsets[span.last][0] < hi <= offsets[span.last][1]


def test_smollm2_folds_the_leading_space_into_the_first_identity_token(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ids, spans = prompt_spans(tok, _build("P0S0T0", "a person from Canada", "a Muslim"), chat.SYSTEM)
    persona = spans["perceiver"]
    first = tok.decode(ids[persona.start : persona.start + 1])
    assert first == " a"  # "Ġa": starts one character before the slot, still part of the span
    assert tok.decode(ids[persona.start - 1 : persona.start]) == " are"


def test_person_and_person_from_canada_get_distinct_spans(tokenizer):
    prompt = _build("P0S0T0", "a person from Canada", "a person")
    text, _ = chat.render(tokenizer, prompt, chat.SYSTEM)
    ids, spans = prompt_spans(tokenizer, prompt, chat.SYSTEM)
    persona, experiencer = spans["perceiver"], spans["experiencer"]
    assert tokenizer.decode(ids[persona.start : persona.end]).strip() == "a person from Canada"
    assert tokenizer.decode(ids[experiencer.start : experiencer.end]).strip() == "a person"
    assert persona.end <= experiencer.start
    user_start = text.index(prompt.messages[1]["content"])
    offsets = _offsets(tokenizer, text)
    assert offsets[persona.last][1] <= user_start <= offsets[experiencer.start][0]


@pytest.mark.parametrize("setting", ["P0S0T0", "P3S0T0", "P0S0T1", "P0S0T2"])
def test_narrative_repeating_identities_does_not_move_spans(tokenizer, setting):
    perceiver, experiencer = "a person from Canada", "a person"
    plain = _build(setting, perceiver, experiencer, narrative="I told my neighbour about it.")
    echo = _build(setting, perceiver, experiencer, narrative=f"I told {perceiver} and then {experiencer} about it.")
    text, _ = chat.render(tokenizer, echo, chat.SYSTEM)
    assert text.count(perceiver) == 2 and text.count(experiencer) >= 4
    plain_ids, plain_spans = prompt_spans(tokenizer, plain, chat.SYSTEM)
    echo_ids, echo_spans = prompt_spans(tokenizer, echo, chat.SYSTEM)
    for name in ("perceiver", "experiencer"):
        assert echo_spans[name] == plain_spans[name]
        _assert_tight(tokenizer, echo_ids, echo_spans[name], perceiver if name == "perceiver" else experiencer)
    assert len(echo_ids) > len(plain_ids) and echo_spans["final"].start > plain_spans["final"].start


def test_final_is_the_last_token(tokenizer):
    for setting in ("P0S0T0", "P0S1T0"):
        ids, spans = prompt_spans(tokenizer, _build(setting, "a Hindu", "a Buddhist"), chat.SYSTEM)
        final = spans["final"]
        assert final == TokenSpan("final", len(ids) - 1, len(ids))
        assert len(final) == 1 and final.last == len(ids) - 1
        assert ids[final.last] == ids[-1]


def test_prompt_spans_ids_are_the_rendered_text_without_added_specials(tokenizer):
    prompt = _build("P1S0T0", "a Jew", "a Muslim")
    text, _ = chat.render(tokenizer, prompt, chat.SYSTEM)
    ids, _ = prompt_spans(tokenizer, prompt, chat.SYSTEM)
    assert ids == tokenizer(text, add_special_tokens=False).input_ids
    assert tokenizer.decode(ids) == text


def test_plain_prompts_get_spans_and_the_tokenizers_special_tokens(smollm2_tokenizer, tokenizer):
    """Plain text (base models): the spans hold the identities, and the ids are what the run feeds the model."""
    for tok in (smollm2_tokenizer, tokenizer):
        prompt = _build("P0S0T0", "a person from Canada", "a Muslim")
        ids, spans = prompt_spans(tok, prompt, chat.PLAIN)
        assert ids == chat.encode(tok, prompt, chat.PLAIN)
        _assert_tight(tok, ids, spans["perceiver"], "a person from Canada")
        _assert_tight(tok, ids, spans["experiencer"], "a Muslim")


# --- the system-in-user fallback -----------------------------------------------------------------------------------

@pytest.mark.parametrize("setting", ["P0S0T0", "P2S0T0", "P0S0T2"])
def test_folded_system_gives_correct_spans(no_system_tokenizer, setting):
    tok = no_system_tokenizer
    prompt = _build(setting, "a person from Canada", "a person")
    assert chat.detect_format(tok) == chat.FOLDED
    text, rendered = chat.render(tok, prompt, chat.FOLDED)
    assert len(rendered.messages) == 1 and text.count("<start_of_turn>user") == 1
    ids, spans = prompt_spans(tok, prompt, chat.FOLDED)
    _assert_tight(tok, ids, spans["perceiver"], "a person from Canada")
    _assert_tight(tok, ids, spans["experiencer"], "a person")
    assert spans["perceiver"].end <= spans["experiencer"].start
    assert spans["final"].last == len(ids) - 1
    chars = char_spans(text, rendered)
    assert text[slice(*chars["perceiver"])] == "a person from Canada"
    assert text[slice(*chars["experiencer"])] == "a person"


def test_folded_system_with_a_template_that_prepends_its_own_system_turn(smollm2_tokenizer):
    tok = smollm2_tokenizer
    prompt = _build("P0S0T0", "a person from the United States", "a person from Iran")
    text, _ = chat.render(tok, prompt, chat.FOLDED)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant")  # SmolLM2's default system turn
    ids, spans = prompt_spans(tok, prompt, chat.FOLDED)
    _assert_tight(tok, ids, spans["perceiver"], "a person from the United States")
    _assert_tight(tok, ids, spans["experiencer"], "a person from Iran")


# --- errors ---------------------------------------------------------------------------------------------------------

class _SlowTokenizer:
    is_fast = False
    name_or_path = "slow-stub"


def test_slow_tokenizer_is_refused(tiny_tokenizer):
    prompt = _build("P0S0T0", "a Muslim", "a Christian")
    text, rendered = chat.render(tiny_tokenizer, prompt, chat.SYSTEM)
    with pytest.raises(SpanError, match=r"'slow-stub'.*fast tokenizer"):
        token_spans(_SlowTokenizer(), text, rendered)


def test_mismatching_input_ids_are_refused(tokenizer):
    prompt = _build("P0S0T0", "a Muslim", "a Christian")
    text, rendered = chat.render(tokenizer, prompt, chat.SYSTEM)
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert token_spans(tokenizer, text, rendered, ids) == token_spans(tokenizer, text, rendered)
    with pytest.raises(SpanError, match="input_ids"):
        token_spans(tokenizer, text, rendered, ids[1:])
    with pytest.raises(SpanError, match="input_ids"):
        token_spans(tokenizer, text, rendered, [tokenizer.bos_token_id or 0] + ids)


def test_empty_slot_is_refused(tiny_tokenizer):
    prompt = _build("P0S0T0", "", "a Christian")
    with pytest.raises(SpanError, match=r"slot 'perceiver'.*no token"):
        prompt_spans(tiny_tokenizer, prompt, chat.SYSTEM)


def test_error_is_a_value_error():
    assert issubclass(SpanError, ValueError)


# --- alignment for patching -----------------------------------------------------------------------------------------

def test_token_span_len_and_last():
    span = TokenSpan("persona", 4, 9)
    assert len(span) == 5 and span.last == 8


def test_align_equal_lengths():
    assert align_from_end(TokenSpan("s", 2, 5), TokenSpan("t", 10, 13)) == [(4, 12), (3, 11), (2, 10)]


def test_align_source_longer():
    # "a person from the United States" (longer) onto "a person from Iran": pairs end with the shorter span's start
    assert align_from_end(TokenSpan("s", 0, 6), TokenSpan("t", 20, 23)) == [(5, 22), (4, 21), (3, 20)]


def test_align_target_longer():
    assert align_from_end(TokenSpan("s", 7, 9), TokenSpan("t", 0, 4)) == [(8, 3), (7, 2)]


def test_align_explicit_n():
    assert align_from_end(TokenSpan("s", 0, 6), TokenSpan("t", 20, 24), n=1) == [(5, 23)]
    assert align_from_end(TokenSpan("s", 0, 6), TokenSpan("t", 20, 24), n=4) == [(5, 23), (4, 22), (3, 21), (2, 20)]
    with pytest.raises(SpanError, match="1 <= n <= 4"):
        align_from_end(TokenSpan("s", 0, 6), TokenSpan("t", 20, 24), n=5)
    with pytest.raises(SpanError):
        align_from_end(TokenSpan("s", 0, 6), TokenSpan("t", 20, 24), n=0)


def test_align_real_spans_of_different_lengths(tiny_tokenizer):
    long = _build("P0S0T0", "a person from the United States", "a person")
    short = _build("P0S0T0", "a person from Iran", "a person")
    long_ids, long_spans = prompt_spans(tiny_tokenizer, long, chat.SYSTEM)
    short_ids, short_spans = prompt_spans(tiny_tokenizer, short, chat.SYSTEM)
    src, tgt = long_spans["perceiver"], short_spans["perceiver"]
    assert len(src) > len(tgt)
    pairs = align_from_end(src, tgt)
    assert len(pairs) == len(tgt) and pairs[0] == (src.last, tgt.last) and pairs[-1][1] == tgt.start
    assert [p for p, _ in pairs] == list(range(src.last, src.last - len(tgt), -1))
    # the final tokens align one to one as well
    assert align_from_end(long_spans["final"], short_spans["final"]) == [(len(long_ids) - 1, len(short_ids) - 1)]
