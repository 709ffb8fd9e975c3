"""A model answering prompts: loading (hub, local folder, GGUF), prompt and chat formats, answer spaces and their
trees (full, lazy, bounded), the prefix plan, the engine, and vLLM as a second backend."""
