"""The ERA measure: EPITOME's three dimensions (IP interpretations, EX explorations, ER emotional reactions), each a
0/1/2 (none, weak, strong) label of a (speaker utterance, reply) pair from a sequence classifier. No EPITOME weights
ship: users pass their own classifiers; without them ERA is unavailable, never 0."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import torch

from behavioral.suites.jaem.errors import JaemInputError

DIMENSIONS = ("IP", "EX", "ER")
SIDE_TOKENS = 64


class EraScorer(Protocol):
    """Anything that labels (seeker utterance, reply) pairs on IP, EX and ER."""

    def score(self, seekers: Sequence[str], responses: Sequence[str]) -> dict[str, list[int]]: ...


def parse_era_models(spec: str) -> dict[str, str]:
    """`IP=ID,EX=ID,ER=ID` as {dimension: model id or folder}; each dimension exactly once."""
    models: dict[str, str] = {}
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        key = key.strip().upper()
        if not sep or key not in DIMENSIONS or not value.strip() or key in models:
            raise JaemInputError(f"--era-model {spec!r}: bad entry {part!r}; expected IP=ID,EX=ID,ER=ID, each once")
        models[key] = value.strip()
    missing = [d for d in DIMENSIONS if d not in models]
    if missing:
        raise JaemInputError(f"--era-model {spec!r}: missing {', '.join(missing)}; expected IP=ID,EX=ID,ER=ID")
    return models


class HFEraScorer:
    """ERA from three `AutoModelForSequenceClassification` models with 3 labels (none, weak, strong): the input is
    the pair (speaker's last utterance, reply), lowercased, each side cut to 64 tokens; the label is the argmax."""

    def __init__(self, models: Mapping[str, object], batch_size: int = 16, device: str = "cpu"):
        missing = [d for d in DIMENSIONS if d not in models]
        if missing:
            raise JaemInputError(f"ERA classifiers missing for {', '.join(missing)}; expected IP, EX and ER")
        self.batch_size = batch_size
        self.device = device
        self.models = {d: self._load(d, models[d]) for d in DIMENSIONS}

    def _load(self, dimension: str, spec) -> tuple:
        """(model, tokenizer) from a (model, tokenizer) pair or a folder / hub id; 3 labels required."""
        if isinstance(spec, (tuple, list)):
            model, tokenizer = spec
            name = type(model).__name__
        else:
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            try:
                tokenizer = AutoTokenizer.from_pretrained(spec)
                model = AutoModelForSequenceClassification.from_pretrained(spec)
            except (OSError, ValueError) as err:
                raise JaemInputError(f"--era-model {dimension}={spec}: cannot load a sequence classifier "
                                     f"({err})") from err
            name = spec
        n = getattr(model.config, "num_labels", None)
        if n != 3:
            raise JaemInputError(f"ERA classifier {dimension} ({name}) has {n} labels; expected 3 (none, weak, strong)")
        return model.to(self.device).eval(), tokenizer

    @torch.no_grad()
    def score(self, seekers: Sequence[str], responses: Sequence[str]) -> dict[str, list[int]]:
        """{"IP": labels, "EX": labels, "ER": labels}, one 0/1/2 label per pair."""
        if len(seekers) != len(responses):
            raise ValueError(f"{len(seekers)} seeker texts but {len(responses)} responses; expected pairs")
        out: dict[str, list[int]] = {}
        for dimension, (model, tokenizer) in self.models.items():
            labels: list[int] = []
            for start in range(0, len(seekers), self.batch_size):
                a = [self._side(tokenizer, t) for t in seekers[start:start + self.batch_size]]
                b = [self._side(tokenizer, t) for t in responses[start:start + self.batch_size]]
                batch = tokenizer(a, b, padding=True, return_tensors="pt")
                logits = model(input_ids=batch["input_ids"].to(self.device),
                               attention_mask=batch["attention_mask"].to(self.device)).logits
                labels += logits.argmax(-1).tolist()
            out[dimension] = labels
        return out

    @staticmethod
    def _side(tokenizer, text: str) -> str:
        """One side of the pair: lowercased, cut to its first 64 tokens."""
        ids = tokenizer(text.lower(), add_special_tokens=False, truncation=True, max_length=SIDE_TOKENS)["input_ids"]
        return tokenizer.decode(ids)
