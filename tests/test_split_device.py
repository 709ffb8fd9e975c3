"""A model split over devices with accelerate (models.load's device_map) gives the engine's answers, captured states and
interventions of the same model on one device. On CPU the split is over the two entries one machine has: modules on
"cpu" and modules on "disk", whose weights accelerate's hooks read from the offload folder for every forward (meta
between forwards) while AlignDevicesHook moves their inputs: the hook path a model over several GPUs takes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from activations.capture import ResidualTrace, resid_post
from behavioral.inference import models
from behavioral.inference.model_source import EMBEDDED_ALIAS
from behavioral.inference.answer_space import AnswerTrie
from behavioral.inference.engine import Engine, Sampling, stream_seed
from behavioral.suites.intergroup import patching as IP
from behavioral.suites.intergroup.corpus import Event
from interp import attribution as A
from interp import patching as P
from interp.patching import PatchSpec
from interp.steering import steer
from behavioral.rundir.manifest import read_manifest
from behavioral.runner.run import RunConfig, run
from behavioral.rundir.parts import read_results
from behavioral.suites.intergroup import Options
from tests.test_engine import _prompt_ids

PROBS = 1e-6
STATES = 1e-5
# the tiny model's modules (2 decoder layers): "late" offloads the second layer and the head (the answer tree is read
# through offloaded weights); "early" the embedding and the first layer (inputs go to a module whose weights are meta)
SPLITS = {
    "late": {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu",
             "model.layers.1": "disk", "model.norm": "cpu", "lm_head": "disk"},
    "early": {"model.embed_tokens": "disk", "model.rotary_emb": "cpu", "model.layers.0": "disk",
              "model.layers.1": "cpu", "model.norm": "cpu", "lm_head": "cpu"},
}
EVENTS = [Event("joy-t1", "joy", "I won the race.", "I felt joy when I won the race."),
          Event("fear-t2", "fear", "A dog ran at me.", "I felt fear when a dog ran at me.")]


@pytest.fixture(scope="module")
def whole(tiny_model_dir):
    """The tiny model on the CPU in one piece, loaded as a run loads it."""
    return models.load(str(tiny_model_dir), device="cpu", dtype="fp32")


@pytest.fixture(scope="module", params=sorted(SPLITS))
def split(request, tiny_model_dir, tmp_path_factory):
    """The same model split by a device_map over cpu and disk."""
    folder = tmp_path_factory.mktemp(f"offload-{request.param}")
    return models.load(str(tiny_model_dir), device="cpu", dtype="fp32", device_map=SPLITS[request.param],
                       offload_folder=folder)


def engines(whole, split, **kwargs) -> tuple[Engine, Engine]:
    """An engine on each of the two loadings, with the same settings."""
    return Engine(whole[0], whole[1], **kwargs), Engine(split[0], split[1], **kwargs)


def assert_same_scores(a, b) -> None:
    """The same answer distributions (within PROBS) and greedy answers."""
    assert [s.greedy for s in a] == [s.greedy for s in b]
    assert np.abs(np.array([s.probs for s in a]) - np.array([s.probs for s in b])).max() <= PROBS
    assert [s.expected for s in a] == pytest.approx([s.expected for s in b], abs=1e-4)


def test_the_split_is_recorded_and_its_offloaded_weights_are_off_the_device(split, request):
    model, _, info = split
    name = request.node.callspec.params["split"]
    assert info["device_map"] == SPLITS[name] and info["device"] == "cpu"
    offloaded = [m for m, place in SPLITS[name].items() if place == "disk"]
    assert all(p.device.type == "meta" for m in offloaded for p in model.get_submodule(m).parameters())


def test_a_map_that_keeps_the_model_on_one_device_records_that_device(tiny_model_dir):
    _, _, info = models.load(str(tiny_model_dir), device="cpu", dtype="fp32", device_map="auto",
                             max_memory={"cpu": "1GiB"})
    assert info["device_map"] == {"": "cpu"} and info["device"] == "cpu"


def test_score_equals_the_unsplit_model(whole, split, tiny_tokenizer):
    ids = _prompt_ids(tiny_tokenizer, 6)
    trie = AnswerTrie.for_scale(tiny_tokenizer, 100)
    plain, parted = engines(whole, split, batch_size=4)
    assert parted.head is not None  # the answer tree is read through the (possibly offloaded) head's weights
    assert_same_scores(parted.score(ids, trie), plain.score(ids, trie))


def test_generate_equals_the_unsplit_model_greedy_sampled_and_with_scores(whole, split, tiny_tokenizer):
    ids = _prompt_ids(tiny_tokenizer, 6)
    until = [lambda text, k=k: len(text) > k for k in range(2, 8)]  # rows leave the batch at different steps
    plain, parted = engines(whole, split, batch_size=4, max_new_tokens=12)
    assert [g.text for g in parted.generate(ids, until)] == [g.text for g in plain.generate(ids, until)]
    seeds = [stream_seed(7, i) for i in range(len(ids))]
    sampled = Sampling(temperature=1.0, top_p=0.9)
    assert ([g.text for g in parted.generate(ids, sampling=sampled, seeds=seeds)]
            == [g.text for g in plain.generate(ids, sampling=sampled, seeds=seeds)])
    trie = AnswerTrie.for_scale(tiny_tokenizer, 10)
    a, b = parted.generate_and_score(ids, trie, until), plain.generate_and_score(ids, trie, until)
    assert [g.text for g in a] == [g.text for g in b]
    assert_same_scores([g.scores for g in a], [g.scores for g in b])


def test_captured_states_equal_the_unsplit_model(whole, split, tiny_tokenizer):
    ids = _prompt_ids(tiny_tokenizer, 5)
    trie = AnswerTrie.for_scale(tiny_tokenizer, 10)
    states = []
    for model, engine in zip((whole[0], split[0]), engines(whole, split, batch_size=2)):
        with engine.hooked(tracer=lambda positions, model=model: ResidualTrace(model, None, positions=positions)):
            states.append(torch.stack([s.state for s in engine.score(ids, trie)]))
    assert states[0].shape == (5, 3, 64)  # hook_embed and both blocks
    torch.testing.assert_close(states[1], states[0], atol=STATES, rtol=0)
    batch = torch.tensor([ids[0][:20], ids[1][:20]])
    torch.testing.assert_close(resid_post(split[0], batch), resid_post(whole[0], batch), atol=STATES, rtol=0)


def test_steering_gives_the_unsplit_models_scores(whole, split, tiny_tokenizer):
    ids = _prompt_ids(tiny_tokenizer, 4)
    trie = AnswerTrie.for_scale(tiny_tokenizer, 100)
    direction = torch.linspace(-1, 1, 64)
    steered = []
    for model, engine in zip((whole[0], split[0]), engines(whole, split, batch_size=4)):
        with steer(model, [0, 1], direction, coef=4.0, engine=engine):
            steered.append(engine.score(ids, trie))
        unsteered = engine.score(ids, trie)
    assert_same_scores(steered[1], steered[0])
    assert max(abs(a.expected - b.expected) for a, b in zip(steered[1], unsteered)) > 1e-3


def test_patching_gives_the_unsplit_models_scores(whole, split, tiny_tokenizer):
    trie = IP.setting_trie(tiny_tokenizer, "P0S1T0")
    targets = [IP.build(tiny_tokenizer, "P0S1T0", "a Muslim", "a Jew", e) for e in EVENTS]
    sources = [IP.build(tiny_tokenizer, "P0S1T0", "a Hindu", "a Jew", e) for e in EVENTS]
    spec = PatchSpec(("hook_embed", 0, 1), "system")
    plain, parted = engines(whole, split, batch_size=4)
    assert_same_scores(P.patched_scores(parted, targets, sources, spec, trie),
                       P.patched_scores(plain, targets, sources, spec, trie))


@pytest.mark.parametrize("max_memory, named", [
    ({"gpu0": "10GiB"}, "'gpu0'"), ({-1: "10GiB"}, "-1"), ({True: 100}, "True"),
    ({"cpu": "10 gigabytes"}, "'10 gigabytes'"), ({"cpu": "10Gb"}, "'10Gb'"), ({0: -5}, "-5"),
    ({"cpu": 1.5}, "1.5"), ({}, "{}"), (["cpu"], "['cpu']"),
])
def test_a_bad_max_memory_is_one_line_naming_it(tiny_model_dir, max_memory, named):
    with pytest.raises(models.ModelLoadError) as err:
        models.load(str(tiny_model_dir), device="cpu", device_map="auto", max_memory=max_memory)
    message = str(err.value)
    assert "\n" not in message and named in message and "expected" in message


def test_max_memory_keys_are_read_as_accelerate_reads_them():
    assert models.memory_limits({"0": "1GiB", "cuda:1": 2**30, 2: "512MiB", "cpu": "8GB", "disk": 0}) == {
        0: "1GiB", 1: 2**30, 2: "512MiB", "cpu": "8GB", "disk": 0}


@pytest.mark.parametrize("device_map, named", [
    ("everywhere", "'everywhere'"), ({"model.layers.0": "gpu"}, "'gpu'"), ({"lm_head": -1}, "-1"), ({}, "{}"),
])
def test_a_bad_device_map_is_one_line_naming_it(tiny_model_dir, device_map, named):
    with pytest.raises(models.ModelLoadError) as err:
        models.load(str(tiny_model_dir), device="cpu", device_map=device_map)
    message = str(err.value)
    assert "\n" not in message and named in message and "expected" in message


def test_max_memory_without_a_device_map_is_refused(tiny_model_dir):
    with pytest.raises(models.ModelLoadError, match="expected a device_map"):
        models.load(str(tiny_model_dir), device="cpu", max_memory={"cpu": "1GiB"})


def test_a_gguf_model_with_disk_entries_is_refused_before_its_weights_are_read(tmp_path):
    file = tmp_path / "model.Q8_0.gguf"
    file.write_bytes(b"GGUF")  # never parsed: the refusal comes first
    with pytest.raises(models.ModelLoadError) as err:
        models.load(str(file), device="cpu", device_map={"model": "cpu", "lm_head": "disk"})
    assert "\n" not in str(err.value) and "'lm_head'" in str(err.value) and ".gguf" in str(err.value)


def test_attribution_gives_the_unsplit_models_map(whole, split, tiny_tokenizer):
    trie = IP.setting_trie(tiny_tokenizer, "P0S1T0")
    clean, corrupted = (IP.build(tiny_tokenizer, "P0S1T0", p, "a Jew", EVENTS[0]) for p in ("a Muslim", "a person"))
    pair = A.Pair(clean, corrupted, trie, A.expected_metric(trie))
    plain, parted = engines(whole, split, batch_size=4)
    a, b = A.attribute(parted, [pair], graddrop=True).nodes, A.attribute(plain, [pair], graddrop=True).nodes
    for column in ("atp", "graddrop", "patch_norm"):
        np.testing.assert_allclose(a[column], b[column], atol=STATES, rtol=1e-4)
    assert np.abs(b["atp"]).max() > 1e-3


def test_the_embedded_gguf_model_split_by_max_memory_scores_as_it_does_whole(smollm2, tmp_path):
    """The .gguf is dequantized at load, so accelerate can place it: an auto map within a small cpu budget spills the
    later layers to disk (transformers refuses only a map that names disk itself)."""
    model, tokenizer, _ = smollm2
    parted, _, info = models.load(EMBEDDED_ALIAS, device="cpu", dtype="fp32", device_map="sequential",
                                  max_memory={"cpu": "300MB"}, offload_folder=tmp_path)
    assert {"cpu", "disk"} <= set(info["device_map"].values())
    ids = _prompt_ids(tokenizer, 4)
    trie = AnswerTrie.for_scale(tokenizer, 100)
    whole_engine, split_engine = Engine(model, tokenizer, batch_size=4), Engine(parted, tokenizer, batch_size=4)
    assert_same_scores(split_engine.score(ids, trie), whole_engine.score(ids, trie))


def test_a_run_on_a_split_device_writes_the_rows_of_one_device_and_records_the_split(tiny_model_dir, tmp_path):
    """`--device split:cpu=1GiB` (device_map auto within the cap, as split:0=70GiB,1=70GiB,cpu=200GiB spreads a
    large model over two GPUs and the host): the run's rows are the one-device run's, its manifest says where
    each module went."""
    options = Options(categories=("religion",), settings=("P0S0T0",), limit_events=1)
    rows = {}
    for name, device in (("one", "cpu"), ("split", "split:cpu=1GiB")):
        out = run(RunConfig("intergroup", str(tiny_model_dir), options=options, mode="score", dtype="fp32",
                            device=device, store_probs=True), tmp_path / name, progress=False)
        rows[name] = read_results(out).sort_values(["unit_id", "item_id"]).reset_index(drop=True)
    assert len(rows["one"]) == 36 and list(rows["one"].score_answer) == list(rows["split"].score_answer)
    assert np.abs(np.stack(rows["one"].probs) - np.stack(rows["split"].probs)).max() <= PROBS
    assert read_manifest(tmp_path / "split").model["device_map"] == {"": "cpu"}
    assert "device_map" not in read_manifest(tmp_path / "one").model
