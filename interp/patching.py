"""Activation patching of the persona: score a target prompt (perceiver B, experiencer X, event e) while its residual
stream at chosen layers and positions is replaced by values taken from a source prompt (perceiver A, same X and e).

The public API, by job (each module's docstring has the details):

- what and where (``interp.patch_spec``): ``PatchSpec`` (layers, position group), ``build`` / ``encode`` (prompts
  with their persona and system spans), ``align`` (the alignment rules), ``get_trie`` (a setting's answer trie);
- source values (``interp.patch_sources``): ``source_states``, one forward per distinct source prefix;
- the patched forward (``interp.patch_run``): ``patched_scores`` for a few prompts, ``run_jobs`` underneath;
- many prompts (``interp.patch_sweep``): ``evaluate``, ``sweep`` (layer × position group), ``summarize``,
  ``plot_heatmap``;
- the headline (``interp.patch_gap``): ``patched_gap`` / ``patched_gap_prompts`` + ``gap_table``: δ after patching
  every persona at one layer, and ``plot_gap_by_layer``.

>>> target = build(tok, "P0S1T0", "a Muslim", "a Muslim", event)
>>> source = build(tok, "P0S1T0", "a person", "a Muslim", event)
>>> clean, patched = patched_scores(engine, [target] * 2, [source] * 2,
...                                 [PatchSpec(()), PatchSpec(range(10, 16), "persona_end")], get_trie(tok, "P0S1T0"))
"""

from activations.capture import EMBED_LAYER
from interp.patch_gap import GAP_COLUMNS, GAP_MODES, gap_table, patched_gap, patched_gap_prompts, plot_gap_by_layer, \
    swap_source
from interp.patch_run import Job, PatchScores, patched_scores, run_jobs
from interp.patch_sources import SourceStates, source_states
from interp.patch_spec import POSITION_GROUPS, SYSTEM_GROUP, PatchError, PatchPrompt, PatchSpec, align, build, \
    encode, get_trie
from interp.patch_sweep import METRICS, SWEEP_COLUMNS, SWEEP_POSITION_GROUPS, evaluate, plot_heatmap, summarize, sweep

__all__ = [
    "EMBED_LAYER", "GAP_COLUMNS", "GAP_MODES", "METRICS", "POSITION_GROUPS", "SWEEP_COLUMNS", "SWEEP_POSITION_GROUPS",
    "SYSTEM_GROUP", "Job", "PatchError", "PatchPrompt", "PatchScores", "PatchSpec", "SourceStates", "align", "build",
    "encode", "evaluate", "gap_table", "get_trie", "patched_gap", "patched_gap_prompts", "patched_scores",
    "plot_gap_by_layer", "plot_heatmap", "run_jobs", "source_states", "summarize", "swap_source", "sweep",
]
