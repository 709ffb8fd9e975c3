"""Third-person narratives (setting T2) by the 1-shot rewrite prompt of seed 000 appendix A.2, cached per run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from behavioral.inference import models
from behavioral.suites.intergroup.corpus import Event
from behavioral.inference.engine import Engine
from behavioral.suite.protocol import local_path

CACHE = "rewrites.jsonl"
PROMPT = (
    "Rewrite the text.\n"
    "Example:\n"
    "Text: {{The person: I am thinking about this situation.}}\n"
    "Rewrite: {{The person is thinking about this situation.}}\n"
    "\n"
    "Text: {{The person: {narrative}}}\n"
    "Rewrite: {{"
)
MAX_NEW_TOKENS = 160


def rewrite_prompt(first_person: str) -> str:
    """The appendix A.2 rewrite prompt for one first-person narrative."""
    return PROMPT.format(narrative=first_person)


def extract_rewrite(response: str) -> str:
    """The rewritten sentence from a reply: text after an echoed `Rewrite: {`, up to the closing brace."""
    text = response.strip()
    for prefix in ("Rewrite: {", "Rewrite:", "{"):
        text = text.removeprefix(prefix).strip()
    return text.split("}", 1)[0].strip()


def _read_cache(path: Path, model: str) -> dict[str, str]:
    cached: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a kill
                continue
            if row["rewrite_model"] == model:
                cached[row["event_id"]] = row["third_person"]
    return cached


def ensure_third_person(events: list[Event], config, out: Path, model, tokenizer, batch_size: int = 16) -> list[Event]:
    """Events with third-person text, rewriting those that lack it and appending each batch to out/rewrites.jsonl
    (with `model` None, as for a vLLM run, only what that cache holds, or a named rewrite_model's new rewrites: a
    ValueError where neither gives them)."""
    missing = [e for e in events if e.third_person is None]
    if not missing:
        return events
    name = config.options.rewrite_model or local_path(config.model)
    path = Path(out) / CACHE
    cached = _read_cache(path, name)
    todo = [e for e in missing if e.event_id not in cached]
    if todo and model is None and name == local_path(config.model):
        raise ValueError(f"{path}: lacks the third-person rewrites of {len(todo)} events, which the engine writes "
                         "(a run with --backend engine, or one naming a rewrite_model)")
    if todo:
        if name != local_path(config.model):
            model, tokenizer, _ = models.load(name, config.device, config.dtype, config.trust_remote_code)
        engine = Engine(model, tokenizer, batch_size, MAX_NEW_TOKENS)
        path.parent.mkdir(parents=True, exist_ok=True)
        for start in range(0, len(todo), batch_size):
            batch = todo[start:start + batch_size]
            ids = [
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": rewrite_prompt(e.first_person)}],
                    tokenize=True, add_generation_prompt=True, return_dict=True,
                )["input_ids"]
                for e in batch
            ]
            with open(path, "a") as f:
                for event, reply in zip(batch, engine.generate(ids)):
                    cached[event.event_id] = extract_rewrite(reply.text)
                    f.write(json.dumps({"event_id": event.event_id, "rewrite_model": name,
                                        "third_person": cached[event.event_id]}) + "\n")
    return [e if e.third_person is not None else dataclasses.replace(e, third_person=cached[e.event_id])
            for e in events]
