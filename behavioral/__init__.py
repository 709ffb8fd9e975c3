"""empathy-gap: intergroup empathy gaps in language models, measured and explained.

The names a script needs, each imported on first use (so `import behavioral` imports neither torch nor a suite):
`load` a model and `score` or `generate` prompts with it; `get_suite` for a suite's items and options; `RunConfig`
and `run` for a resumable run directory, `read_runs` to read runs back, `analyze` for their report; `read_sweep` and
`run_sweep` for models × suites from one TOML file; `run_study` for a mechanistic study of captured runs. Their
examples run in this order as one session (tests/test_public_face.py), each using what the ones before it made.
"""

from behavioral.core.exports import lazy_exports

__all__ = ["load", "LoadedModel", "AnswerSpec", "Prompt", "get_suite", "RunConfig", "run", "read_runs", "analyze",
           "read_sweep", "run_sweep", "run_study"]
__getattr__ = lazy_exports(__name__, {
    "behavioral.inference.loaded": ("load", "LoadedModel"),
    "behavioral.inference.answer_spec": ("AnswerSpec",),
    "behavioral.inference.prompt": ("Prompt",),
    "behavioral.suite.registry": ("get_suite",),
    "behavioral.runner.config": ("RunConfig",),
    "behavioral.runner.run": ("run",),
    "behavioral.analysis.runs": ("read_runs",),
    "behavioral.analysis.write": ("analyze",),
    "behavioral.sweep.config": ("read_sweep",),
    "behavioral.sweep.runner": ("run_sweep",),
    "behavioral.analysis.study": ("run_study",),
})
