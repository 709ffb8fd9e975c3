"""vLLM behind the engine's interface: its engine arguments checked by the project's table, the engine, and the
logits processors that read answer trees inside vLLM."""
