"""The logits processors the vLLM backend runs inside vLLM's workers, which load them by name (so this module imports
vLLM): the engine's early stop of a reply that decides its answer, and the readout of one answer-tree position."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import torch
from transformers import AutoTokenizer
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from behavioral.inference.answer_space import AnswerTrie
from behavioral.inference.vllm.engine import POSITION, SPEC, STOP, UNTIL
from behavioral.inference.vllm.readout import readout

RowProcessor = Callable[[list[int], torch.Tensor], torch.Tensor]


def _tokenizer(vllm_config):
    """The model's Hugging Face tokenizer, which decodes replies as the run decodes them."""
    config = vllm_config.model_config
    return AutoTokenizer.from_pretrained(config.tokenizer, trust_remote_code=config.trust_remote_code)


class DecidedStop(AdapterLogitsProcessor):
    """Ends a reply (its only allowed token: the request's stop token) once the reply so far decides its answer
    (the item's `decided`, as the engine stops decoding it)."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        super().__init__(vllm_config, device, is_pin_memory)
        self.tokenizer = _tokenizer(vllm_config)

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params) -> RowProcessor | None:
        extra = params.extra_args or {}
        if UNTIL not in extra:
            return None
        until, stop = pickle.loads(extra[UNTIL]), extra[STOP]  # pickled by the run that sent the request

        def stop_once_decided(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
            if not output_ids or not until(self.tokenizer.decode(output_ids, skip_special_tokens=True)):
                return logits
            forced = torch.full_like(logits, float("-inf"))
            forced[stop] = 0.0
            return forced

        return stop_once_decided


class TreeReadout(AdapterLogitsProcessor):
    """Replaces a score request's logits by the readout of its answer-tree position (behavioral.inference.vllm.readout)."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        super().__init__(vllm_config, device, is_pin_memory)
        self.tokenizer = _tokenizer(vllm_config)
        self.device = device
        self.tries: dict[bytes, tuple[AnswerTrie, torch.Tensor, torch.Tensor]] = {}

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params) -> RowProcessor | None:
        extra = params.extra_args or {}
        if SPEC not in extra:
            return None
        if extra[SPEC] not in self.tries:
            trie = AnswerTrie.build(self.tokenizer, pickle.loads(extra[SPEC]))
            self.tries[extra[SPEC]] = trie, trie.continues.to(self.device), trie.starts.to(self.device)
        trie, continues, starts = self.tries[extra[SPEC]]
        children = trie.tokens[list(trie.children[extra[POSITION]])].to(self.device)
        return lambda output_ids, logits: readout(logits, continues, starts, children)
