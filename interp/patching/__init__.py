"""Activation patching, in one folder: score a target prompt while its residual stream at chosen layers and positions
is replaced by values taken from a source prompt that differs in one slot; the study (`empathy-gap interp patch`,
``interp.patching.study``) runs a suite's declared protocol (``Suite.protocols["patch"]``): ``SlotPatching`` for a
suite that names its slot, or the suite's own (intergroup's persona and δ by layer).

The public API, by job (each module's docstring has the details):

- what and where (``interp.patching.spec``): ``PatchSpec`` (layers, position group), ``encode`` (a prompt with the
  patched slot's span and the system span), ``align`` (the alignment rules), ``answer_trie`` (a rating scale's trie);
- source values (``interp.patching.sources``): ``source_states``, one forward per distinct source prefix;
- the patched forward (``interp.patching.run``): ``patched_scores`` for a few prompts, ``run_jobs`` underneath;
- many prompts (``interp.patching.sweep``): ``evaluate``, ``sweep`` (layer × position group), ``summarize``,
  ``heatmap_figure``.
- reading a layer profile (``interp.patching.claims``): ``stops_mattering``, the first layer from which every tested
  layer's interval of the effect closed lies within an equivalence margin;
- a protocol declared by values (``interp.patching.slot``): ``SlotPatching`` (slot, baseline, compared field, unit).

>>> target = encode(tok, target_prompt, "perceiver")
>>> source = encode(tok, source_prompt, "perceiver")
>>> clean, patched = patched_scores(engine, [target] * 2, [source] * 2,
...                                 [PatchSpec(()), PatchSpec("10-15", "persona_end")], answer_trie(tok, 10))
"""

from interp.patching.claims import stops_mattering
from interp.patching.run import Job, PatchScores, patched_scores, run_jobs
from interp.patching.slot import SlotPatching
from interp.patching.sources import SourceStates, source_states
from interp.patching.spec import POSITION_GROUPS, SYSTEM_GROUP, PatchError, PatchPrompt, PatchSpec, align, \
    answer_trie, encode
from interp.patching.sweep import METRICS, SWEEP_COLUMNS, SWEEP_POSITION_GROUPS, evaluate, heatmap_figure, summarize, \
    sweep

__all__ = [
    "METRICS", "POSITION_GROUPS", "SWEEP_COLUMNS", "SWEEP_POSITION_GROUPS", "SYSTEM_GROUP", "Job", "PatchError",
    "PatchPrompt", "PatchScores", "PatchSpec", "SlotPatching", "SourceStates", "align", "answer_trie", "encode",
    "evaluate", "heatmap_figure", "patched_scores", "run_jobs", "source_states", "stops_mattering", "summarize",
    "sweep",
]
