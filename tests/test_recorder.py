"""Capture during suite runs: stored vectors equal direct captures, survive a kill, and cost no hook when off."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import activations.recorder as recorder_mod
import activations.store as activation_store
from activations.capture import resid_post
from activations.spans import prompt_spans
from behavioral.rundir.manifest import RunDirError
from behavioral.runner import run as run_mod
from behavioral.suites.intergroup import activations as views
from behavioral.suites.intergroup.corpus import embedded_events, sample_events
from behavioral.suites.intergroup.groups import get_category
from behavioral.suites.intergroup.prompts import build
from behavioral.suites.intergroup.items import IntergroupItem
from behavioral.suites.intergroup.suite import Intergroup
from tests.conftest import CAPTURE_SETTING, intergroup_capture_config, oom_above

SETTING = CAPTURE_SETTING
_config = intergroup_capture_config  # the config of conftest's captured_intergroup run


def _direct(model, tokenizer, perceiver, experiencer, event) -> tuple[torch.Tensor, dict]:
    """States [hooks, T, d] of one whole prompt run alone, and its spans."""
    prompt = build(SETTING, perceiver, experiencer, event.emotion, event.narrative("text"))
    ids, spans = prompt_spans(tokenizer, prompt, "system")
    states = resid_post(model, torch.tensor([ids]))[:, 0]
    return states, spans


def test_persona_and_experiencer_vectors_equal_captures_of_the_whole_prompt(captured_intergroup, tiny_model,
                                                                            tiny_tokenizer):
    store = activation_store.load(captured_intergroup)
    events = sample_events(embedded_events(), 3)
    persona, names = views.persona(store, "religion", SETTING)
    assert names == list(get_category("religion").with_unspecified)
    assert persona.shape == (3, 6, tiny_model.config.hidden_size)  # hook_embed + 2 layers
    experiencer, pairs = views.experiencer(store, "religion", SETTING, reduction="last")
    for i, name in enumerate(names):
        states, spans = _direct(tiny_model, tiny_tokenizer, name, "a Hindu", events[-1])  # another event
        span = spans["perceiver"]
        expected = states[:, span.start:span.end].mean(1).numpy()
        np.testing.assert_allclose(persona[:, i], expected, rtol=2e-3, atol=2e-3)
        row = pairs.index[(pairs.perceiver == name) & (pairs.experiencer == "a Hindu")][0]
        np.testing.assert_allclose(experiencer[:, row], states[:, spans["experiencer"].last].numpy(),
                                   rtol=2e-3, atol=2e-3)


def test_final_means_and_samples_equal_per_prompt_captures(captured_intergroup, tiny_model, tiny_tokenizer):
    store = activation_store.load(captured_intergroup)
    events = sample_events(embedded_events(), 3)
    means, cells = views.final(store, "religion", SETTING)
    assert len(cells) == 36 and set(cells["count"]) == {3}
    samples, sampled = views.final_samples(store, "religion", SETTING)
    assert len(sampled) == 36 * 2
    for row in (0, 7, 35):
        perceiver, experiencer = cells.perceiver[row], cells.experiencer[row]
        finals = [_direct(tiny_model, tiny_tokenizer, perceiver, experiencer, e)[0][:, -1] for e in events]
        np.testing.assert_allclose(means[:, row], torch.stack(finals).mean(0).numpy(), rtol=2e-3, atol=2e-3)
        pick = sampled.index[(sampled.perceiver == perceiver) & (sampled.experiencer == experiencer)][0]
        event = next(e for e in events if e.event_id == sampled.event_id[pick])
        direct = _direct(tiny_model, tiny_tokenizer, perceiver, experiencer, event)[0][:, -1]
        np.testing.assert_allclose(samples[:, pick], direct.numpy(), rtol=2e-3, atol=2e-3)


def test_a_kill_mid_run_resumes_to_the_same_activations(tiny_model_dir, tmp_path, captured_intergroup,
                                                        monkeypatch):
    out = tmp_path / "killed"
    real_rows = run_mod.Runner.rows
    calls = {"n": 0}

    def dying(self, units):
        calls["n"] += 1
        if calls["n"] == 6:
            shutil.copytree(out, tmp_path / "snapshot")  # what a hard kill would leave on disk
            raise KeyboardInterrupt
        return real_rows(self, units)

    monkeypatch.setattr(run_mod.Runner, "rows", dying)
    with pytest.raises(KeyboardInterrupt):
        run_mod.run(_config(tiny_model_dir), out, progress=False)
    monkeypatch.setattr(run_mod.Runner, "rows", real_rows)
    resumed = tmp_path / "snapshot"
    run_mod.run(_config(tiny_model_dir), resumed, progress=False)
    want, _ = views.final(activation_store.load(captured_intergroup), "religion", SETTING)
    got, cells = views.final(activation_store.load(resumed), "religion", SETTING)
    assert set(cells["count"]) == {3}
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_capture_on_a_run_made_without_it_is_refused(tiny_model_dir, tmp_path):
    out = tmp_path / "plain"
    run_mod.run(_config(tiny_model_dir, limit_events=1, capture=()), out, progress=False)
    assert not (out / activation_store.FOLDER).exists()
    with pytest.raises(RunDirError, match="capture"):
        run_mod.run(_config(tiny_model_dir, limit_events=1), out, progress=False)


def test_layers_out_of_range_fail_before_anything_is_written(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="7"):
        run_mod.run(_config(tiny_model_dir, layers="0,7"), tmp_path / "bad", progress=False)
    assert not (tmp_path / "bad").exists()


def test_a_run_without_capture_registers_no_hook(tiny_model_dir, tmp_path, monkeypatch):
    seen = []
    real = torch.nn.Module.register_forward_hook
    monkeypatch.setattr(torch.nn.Module, "register_forward_hook",
                        lambda self, *a, **k: seen.append(type(self).__name__) or real(self, *a, **k))
    run_mod.run(_config(tiny_model_dir, limit_events=1, capture=(), mode="both"), tmp_path / "plain", progress=False)
    assert seen == []


def test_loading_a_run_without_activations_says_so(tmp_path):
    with pytest.raises(activation_store.ActivationStoreError, match="--capture"):
        activation_store.load(tmp_path)


def _span_recorder(model, tokenizer, out, batch_size: int, layers: str = "all") -> recorder_mod.Recorder:
    return recorder_mod.Recorder(model, tokenizer, "system", out, Intergroup.capture, ("persona",), layers, 0, 0,
                                 batch_size)


def _persona_items(n: int) -> list[IntergroupItem]:
    event = embedded_events()[0]
    names = get_category("religion").with_unspecified[:n]
    return [IntergroupItem(SETTING, "religion", name, "a Hindu", event) for name in names]


def test_span_forwards_stop_after_the_last_captured_layer(tiny_model, tiny_tokenizer, tmp_path):
    """Capturing block 0 of 2 runs one decoder layer and no head, with the values of a capture of every layer."""
    items = _persona_items(3)
    every = _span_recorder(tiny_model, tiny_tokenizer, tmp_path / "all", 4)._span_vectors(items, "perceiver")
    calls = []
    modules = [*tiny_model.model.layers, tiny_model.lm_head]
    handles = [m.register_forward_pre_hook(lambda m, a, i=i: calls.append(i)) for i, m in enumerate(modules)]
    try:
        first = _span_recorder(tiny_model, tiny_tokenizer, tmp_path / "0", 4, "0")._span_vectors(items, "perceiver")
    finally:
        for handle in handles:
            handle.remove()
    assert calls == [0] and first.shape == (3, 2, 2, 64)  # one forward through block 0 only
    np.testing.assert_array_equal(first, every[:, :, :2])


def test_span_forwards_halve_their_batch_on_out_of_memory(tiny_model, tiny_tokenizer, tmp_path, monkeypatch):
    """A batch above 2 prompts runs out of memory: it is halved as the engine's are, into the values of prompts
    run one by one, and the smaller size stays."""
    items = _persona_items(6)
    alone = _span_recorder(tiny_model, tiny_tokenizer, tmp_path / "alone", 1)._span_vectors(items, "perceiver")
    real, sizes = recorder_mod.resid_post, []

    monkeypatch.setattr(recorder_mod, "resid_post", oom_above(real, 2, sizes))
    recorder = _span_recorder(tiny_model, tiny_tokenizer, tmp_path / "halved", 6)
    halved = recorder._span_vectors(items, "perceiver")
    assert sizes == [6, 3, 1, 2, 3, 1, 2] and recorder.batch_size == 1
    assert halved.shape == alone.shape == (6, 2, 3, 64)
    np.testing.assert_allclose(halved, alone, rtol=1e-5, atol=1e-5)


def test_shards_are_written_off_the_runs_path_and_a_failed_write_fails_the_run(tiny_model_dir, tmp_path,
                                                                              monkeypatch):
    """On a GPU (here: the CPU taken for one) the run's thread queues each shard; the writer thread writes it (the
    run goes on meanwhile), and a write that fails is raised by the run, after every other queued write finished."""
    import threading

    monkeypatch.setattr(recorder_mod, "BACKGROUND_WRITES", ("cpu",))
    writers, real = set(), recorder_mod.write_shard
    monkeypatch.setattr(recorder_mod, "write_shard",
                        lambda *a, **k: writers.add(threading.current_thread().name) or real(*a, **k))
    out = run_mod.run(_config(tiny_model_dir, limit_events=1), tmp_path / "run", progress=False)
    assert writers and all(name.startswith("activation-shards") for name in writers)
    assert activation_store.load(out).final()[0].size > 0

    def full_disk(run_dir, kind, *rest):
        if kind == "final_mean":
            raise OSError(28, "No space left on device")
        return real(run_dir, kind, *rest)

    monkeypatch.setattr(recorder_mod, "write_shard", full_disk)
    with pytest.raises(OSError, match="No space left"):
        run_mod.run(_config(tiny_model_dir, limit_events=1), tmp_path / "full", progress=False)
    assert any((tmp_path / "full" / activation_store.FOLDER).glob("persona--*.parquet"))


def test_a_cpu_run_writes_its_shards_in_its_own_thread(tiny_model_dir, tmp_path, monkeypatch):
    import threading

    writers, real = set(), recorder_mod.write_shard
    monkeypatch.setattr(recorder_mod, "write_shard",
                        lambda *a, **k: writers.add(threading.current_thread().name) or real(*a, **k))
    run_mod.run(_config(tiny_model_dir, limit_events=1), tmp_path / "run", progress=False)
    assert writers == {threading.current_thread().name}
