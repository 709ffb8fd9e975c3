"""A model loaded for a script: its weights, tokenizer, chat format and engine in one object, so scoring or
generating a prompt is one call, rendered and read as `empathy-gap run` renders and reads a suite's items."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from behavioral.inference import chat, models
from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.answer_space import AnswerTrie, Scores
from behavioral.inference.engine import Engine, Generation, Sampling
from behavioral.inference.prompt import Prompt

Prompts = Prompt | str | Sequence[Prompt | str]


@dataclass
class LoadedModel:
    """A loaded model answering prompts (a `Prompt`, or a string as one user message): `score` reads an answer set's
    distribution from one forward, `generate` decodes replies; `model`, `tokenizer` and `info` are what
    `models.load` gave, `engine` the engine that batches and caches the prompts."""

    model: Any
    tokenizer: Any
    info: dict
    chat_format: str
    engine: Engine
    _tries: dict[AnswerSpec, AnswerTrie] = field(default_factory=dict, repr=False)

    @property
    def loaded(self) -> tuple[Any, Any, dict]:
        """(model, tokenizer, info), as `run`, `run_sweep` and the studies take an already loaded model."""
        return self.model, self.tokenizer, self.info

    def tokens(self, prompt: Prompt | str) -> list[int]:
        """Token ids of `prompt` rendered in the model's chat format."""
        return chat.encode(self.tokenizer, _prompt(prompt), self.chat_format)

    def score(self, prompts: Prompts, answers: AnswerSpec) -> list[Scores]:
        """The answer set's distribution for each prompt (one Scores per prompt, a single prompt included).

        >>> from behavioral import AnswerSpec
        >>> [s] = model.score("Is the sky blue? Answer yes or no.", AnswerSpec.choices({"yes": ["yes", "Yes"],
        ...                                                                            "no": ["no", "No"]}))
        >>> s.greedy in ("yes", "no") and abs(sum(s.probs) - 1) < 1e-6
        True
        """
        if answers not in self._tries:
            self._tries[answers] = AnswerTrie.build(self.tokenizer, answers)
        return self.engine.score([self.tokens(p) for p in _many(prompts)], self._tries[answers])

    def generate(self, prompts: Prompts, temperature: float = 0.0, top_p: float = 1.0,
                 seeds: Sequence[int] | None = None) -> list[Generation]:
        """Each prompt's reply, greedy unless `temperature` > 0 (then prompt i draws from its own stream `seeds[i]`).

        >>> [reply] = model.generate("Say hello.")
        >>> isinstance(reply.text, str) and reply.truncated in (True, False)
        True
        """
        prompts = _many(prompts)
        sampling = Sampling(temperature, top_p)
        if not sampling.greedy and (seeds is None or len(seeds) != len(prompts)):
            raise ValueError(f"sampling needs one seed per prompt; got {0 if seeds is None else len(seeds)} seeds "
                             f"for {len(prompts)} prompts")
        return self.engine.generate([self.tokens(p) for p in prompts], sampling=sampling, seeds=seeds)


def load(spec: str, device: str = "auto", dtype: str = "auto", prompt_format: str = "auto", batch_size: int = 16,
         max_new_tokens: int = 128, trust_remote_code: bool = False) -> LoadedModel:
    """A model by hub id, local folder, .gguf file or installed name (`smollm2-135m`), loaded as a run loads it.

    >>> from behavioral import load
    >>> model = load("smollm2-135m", dtype="fp32", max_new_tokens=16)
    >>> model.info["dtype"], model.chat_format
    ('float32', 'system')
    """
    model, tokenizer, info = models.load(spec, device, dtype, trust_remote_code)
    return LoadedModel(model, tokenizer, info, chat.detect_format(tokenizer, prompt_format),
                       Engine(model, tokenizer, batch_size, max_new_tokens))


def _prompt(prompt: Prompt | str) -> Prompt:
    """A string as a prompt of one user message."""
    return Prompt(({"role": "user", "content": prompt},)) if isinstance(prompt, str) else prompt


def _many(prompts: Prompts) -> list[Prompt | str]:
    """One prompt or several, as a list."""
    return [prompts] if isinstance(prompts, (str, Prompt)) else list(prompts)
