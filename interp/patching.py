"""Activation patching: score a target prompt while its residual stream at chosen layers and positions is replaced by
values taken from a source prompt that differs in one slot (intergroup: the perceiver's persona, same experiencer and
event; the intergroup suite's patching module builds those prompts and the δ-by-layer experiment).

The public API, by job (each module's docstring has the details):

- what and where (``interp.patch_spec``): ``PatchSpec`` (layers, position group), ``encode`` (a prompt with the
  patched slot's span and the system span), ``align`` (the alignment rules), ``answer_trie`` (a rating scale's trie);
- source values (``interp.patch_sources``): ``source_states``, one forward per distinct source prefix;
- the patched forward (``interp.patch_run``): ``patched_scores`` for a few prompts, ``run_jobs`` underneath;
- many prompts (``interp.patch_sweep``): ``evaluate``, ``sweep`` (layer × position group), ``summarize``,
  ``heatmap_figure``.
- reading a layer profile (``interp.patch_claims``): ``stops_mattering``, the first layer from which every tested
  layer's interval of the effect closed lies within an equivalence margin.

>>> target = encode(tok, target_prompt, "perceiver")
>>> source = encode(tok, source_prompt, "perceiver")
>>> clean, patched = patched_scores(engine, [target] * 2, [source] * 2,
...                                 [PatchSpec(()), PatchSpec("10-15", "persona_end")], answer_trie(tok, 10))
"""

from interp.patch_claims import stops_mattering
from interp.patch_run import Job, PatchScores, patched_scores, run_jobs
from interp.patch_sources import SourceStates, source_states
from interp.patch_spec import POSITION_GROUPS, SYSTEM_GROUP, PatchError, PatchPrompt, PatchSpec, align, \
    answer_trie, encode
from interp.patch_sweep import METRICS, SWEEP_COLUMNS, SWEEP_POSITION_GROUPS, evaluate, heatmap_figure, summarize, \
    sweep

__all__ = [
    "METRICS", "POSITION_GROUPS", "SWEEP_COLUMNS", "SWEEP_POSITION_GROUPS", "SYSTEM_GROUP", "Job",
    "PatchError", "PatchPrompt", "PatchScores", "PatchSpec", "SourceStates", "align", "answer_trie", "encode",
    "evaluate", "heatmap_figure", "patched_scores", "run_jobs", "source_states", "stops_mattering", "summarize",
    "sweep",
]
