"""The tokenizer the tests train (byte-level BPE on the intergroup suite's own texts, with a ChatML template): needs
no model files, so it travels to any machine that has `tokenizers` and `transformers`."""

from __future__ import annotations

from behavioral.suites.intergroup.corpus import EMOTIONS, embedded_events
from behavioral.suites.intergroup.groups import CATEGORIES
from behavioral.suites.intergroup.settings import SETTINGS

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>"]


def _corpus_text() -> list[str]:
    """The texts the tokenizer is trained on: prompt templates, identities, emotions, events and the numbers."""
    texts = [t for s in SETTINGS.values() for t in (s.system_template, s.user_template)]
    texts += [i for c in CATEGORIES.values() for i in c.with_unspecified] + list(EMOTIONS)
    texts += [f for e in embedded_events() for f in (e.text, e.first_person, e.third_person)]
    texts += [" ".join(str(v) for v in range(101)), "The person felt", "Rewrite the text. Example: Text: {}"]
    return texts


def build_tiny_tokenizer(chat_template: str = CHATML):
    """A byte-level BPE tokenizer trained here, digits split one per token as in SmolLM2, Qwen2 and Mistral."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(_corpus_text(), trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=chat_template
    )
    tok.add_special_tokens({"additional_special_tokens": SPECIALS[1:]})
    return tok
