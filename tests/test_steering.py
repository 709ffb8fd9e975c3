"""Steering: coefficient 0 (and projecting out a zero direction) reproduces the unsteered run exactly, a nonzero
coefficient acts on every forward (generation included), hooks never outlive the block, the mean difference is the
count-weighted pooled one, and intergroup's in-group direction of a synthetic store is recovered."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pandas as pd
import pytest
import torch

import activations.store as activation_store
from activations.capture import ResidualTrace, hook_names, parse_layers
from behavioral.rundir.manifest import RunDirError, read_manifest
from behavioral.inference import chat
from behavioral.inference import models
from behavioral.runner import run as run_mod
from behavioral.inference.answer_space import AnswerTrie
from behavioral.inference.engine import Engine
from behavioral.runner.estimate import RunEstimate
from behavioral.suites.intergroup import Options, prompts, results
from behavioral.suites.intergroup import steering as protocol
from behavioral.suites.intergroup.corpus import embedded_events
from behavioral.suites.intergroup.groups import get_category
from behavioral.suites.intergroup.rewrite import CACHE as REWRITES
from interp import steering
from interp.steering.controls import summarize
from interp.steering.figure import figures, sweep_figure

SETTING = "P0S1T0"  # the 0..10 scale: a small answer trie keeps the tests fast


def _prompts(tokenizer, n: int) -> list[list[int]]:
    events = embedded_events()
    names = get_category("religion").with_unspecified
    out = []
    for i in range(n):
        p = prompts.build(SETTING, names[i % 3], names[(i + 1) % 6], events[i].emotion, events[i].narrative("text"))
        text, _ = chat.render(tokenizer, p, chat.SYSTEM)
        out.append(tokenizer(text, add_special_tokens=False).input_ids)
    return out


def _direction(model, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(model.config.hidden_size, generator=g)


def _hook_ids(model) -> set:
    """Forward hooks on the model (transformers 5 installs some of its own once, so tests compare snapshots)."""
    return {(name, kind, key) for name, m in model.named_modules()
            for kind, hooks in (("post", m._forward_hooks), ("pre", m._forward_pre_hooks)) for key in hooks}


def _scores(engine, ids, trie):
    return [(s.greedy, s.expected, s.valid_mass, s.start_mass) for s in engine.score(ids, trie)]


def test_coefficient_zero_and_zero_projection_reproduce_scores_and_generations_exactly(tiny_model, tiny_tokenizer):
    hooks_before = _hook_ids(tiny_model)
    ids = _prompts(tiny_tokenizer, 4)
    trie = AnswerTrie.for_scale(tiny_tokenizer, 10)
    engine = Engine(tiny_model, tiny_tokenizer, batch_size=2, max_new_tokens=4)
    plain_gen, plain_scores = engine.generate(ids), _scores(engine, ids, trie)
    direction = _direction(tiny_model) * 5
    for kwargs in ({"coef": 0.0}, {"project": True}):
        vector = torch.zeros_like(direction) if kwargs.get("project") else direction
        with steering.steer(tiny_model, [0, 1], vector, engine=engine, **kwargs) as hooks:
            gen, scores = engine.generate(ids), _scores(engine, ids, trie)
        assert all(n > 0 for n in hooks.calls.values())  # the hooks ran: equality is not for want of steering
        assert gen == plain_gen
        assert scores == plain_scores  # floats compared exactly
    with steering.steer(tiny_model, 1, direction, coef=4.0, engine=engine):
        steered = _scores(engine, ids, trie)
    assert steered != plain_scores
    assert _hook_ids(tiny_model) == hooks_before


def test_a_nonzero_coefficient_changes_the_logits_and_only_from_its_layer_on(tiny_model, tiny_tokenizer):
    ids = torch.tensor([_prompts(tiny_tokenizer, 1)[0]])
    direction = _direction(tiny_model)
    with torch.no_grad():
        plain = tiny_model(ids).logits
        with ResidualTrace(tiny_model, [0, 1]) as base:
            tiny_model(ids)
        with steering.steer(tiny_model, 1, direction, coef=2.0), ResidualTrace(tiny_model, [0, 1]) as trace:
            steered = tiny_model(ids).logits
    assert not torch.allclose(plain, steered)
    names = hook_names(2, [0, 1])
    assert torch.equal(trace[names[1]], base[names[1]])  # layer 0 untouched
    torch.testing.assert_close(trace[names[2]], base[names[2]] + 2.0 * direction, rtol=0, atol=1e-5)
    with torch.no_grad(), steering.steer(tiny_model, "blocks.1.hook_resid_post", direction, coef=2.0):
        torch.testing.assert_close(tiny_model(ids).logits, steered, rtol=0, atol=1e-6)  # a hook name: the same layer
    assert steering.steering_fingerprint("blocks.1.hook_resid_post", direction, 2.0, False, 2) == \
        steering.steering_fingerprint(1, direction, 2.0, False, 2) == \
        steering.steering_fingerprint(-1, direction, 2.0, False, 2)
    with pytest.raises(ValueError, match="layers hook_embed: no token embeddings"):  # the embedding is never steered
        with steering.steer(tiny_model, "hook_embed", direction, coef=2.0):
            pass


def test_minus_one_a_hook_name_and_the_parser_steer_the_same_block(tiny_model, tiny_tokenizer):
    """-1 is the last block, as `--layers -1` (parse_layers) names it; a [n, d] direction follows the order named."""
    ids = torch.tensor([_prompts(tiny_tokenizer, 1)[0]])
    direction = _direction(tiny_model, seed=2)
    logits = []
    with torch.no_grad():
        for layer in (1, -1, "blocks.1.hook_resid_post", "last", parse_layers("-1", 2)):
            with steering.steer(tiny_model, layer, direction, coef=3.0) as hooks:
                logits.append(tiny_model(ids).logits)
            assert hooks.names == ["blocks.1.hook_resid_post"]
        for other in logits[1:]:
            assert torch.equal(other, logits[0])
        both = torch.stack([direction, 2 * direction])
        with steering.steer(tiny_model, [-1, 0], both, coef=1.0):
            reversed_order = tiny_model(ids).logits
        with steering.steer(tiny_model, [0, 1], both.flip(0), coef=1.0):
            assert torch.equal(tiny_model(ids).logits, reversed_order)
    assert steering.steering_fingerprint([-1, 0], direction, 1.0, False, 2) == \
        steering.steering_fingerprint("blocks.1.hook_resid_post,blocks.0.hook_resid_post".split(","), direction, 1.0,
                                      False, 2)


def test_the_fingerprint_of_block_numbers_is_unchanged():
    """Run directories steered before layers were resolved keep their fingerprint: the same blocks, the same hash."""
    direction = np.linspace(-1, 1, 8, dtype=np.float32)
    digest = hashlib.sha256(repr(([3, 1], 2.0, False)).encode())
    digest.update(direction.tobytes())
    assert steering.steering_fingerprint([3, 1], direction, 2.0, False, 4) == digest.hexdigest()[:16] == \
        steering.steering_fingerprint([-1, "blocks.1.hook_resid_post"], direction, 2.0, False, 4)


def test_projection_removes_the_component_along_the_direction(tiny_model, tiny_tokenizer):
    ids = torch.tensor([_prompts(tiny_tokenizer, 1)[0]])
    direction = _direction(tiny_model, seed=3) * 7
    unit = direction / direction.norm()
    with torch.no_grad(), steering.steer(tiny_model, 0, direction, project=True), \
            ResidualTrace(tiny_model, [0]) as trace:
        tiny_model(ids)
    h = trace["blocks.0.hook_resid_post"]
    assert float((h @ unit).abs().max()) < 1e-4
    assert float(h.norm()) > 1.0


def test_steering_acts_on_every_decode_step(tiny_model, tiny_tokenizer):
    """Steered engine generation equals greedy decoding by full forwards of the steered model: the decode steps
    (outside the engine's prompt-forward hook point) are steered too."""
    ids = _prompts(tiny_tokenizer, 1)[0]
    engine = Engine(tiny_model, tiny_tokenizer, batch_size=1, max_new_tokens=5)
    direction = _direction(tiny_model, seed=5) * 3
    with steering.steer(tiny_model, [0, 1], direction, coef=1.5, engine=engine):
        generated = engine.generate([ids])[0].text
        seq = list(ids)
        with torch.no_grad():
            for _ in range(5):
                token = int(tiny_model(torch.tensor([seq])).logits[0, -1].argmax())
                if token in engine.stop_ids:
                    break
                seq.append(token)
    assert generated == tiny_tokenizer.decode(seq[len(ids):], skip_special_tokens=True)
    assert generated != engine.generate([ids])[0].text  # and steering made a difference to this generation


def test_hooks_are_removed_after_the_block_and_after_an_exception(tiny_model):
    hooks_before = _hook_ids(tiny_model)
    direction = _direction(tiny_model)
    with steering.steer(tiny_model, [0, 1], direction, coef=1.0):
        assert len(_hook_ids(tiny_model) - hooks_before) == 2  # one steering hook per steered block
    assert _hook_ids(tiny_model) == hooks_before
    with pytest.raises(RuntimeError, match="boom"):
        with steering.steer(tiny_model, [0, 1], direction, project=True):
            raise RuntimeError("boom")
    assert _hook_ids(tiny_model) == hooks_before
    with pytest.raises(ValueError, match=r"layers: block 5 was not available; available: \[0, 1\]"):
        with steering.steer(tiny_model, [0, 5], direction, coef=1.0):
            pass
    with pytest.raises(ValueError, match="coefficient"):
        with steering.steer(tiny_model, 0, direction):
            pass
    with pytest.raises(ValueError, match="direction"):
        with steering.steer(tiny_model, 0, direction[:10], coef=1.0):
            pass
    assert _hook_ids(tiny_model) == hooks_before


def _config(model_dir, **overrides) -> run_mod.RunConfig:
    fields = dict(suite="intergroup", model=str(model_dir),
                  options=Options(categories=("religion",), settings=(SETTING,), limit_events=1), unit_size=2,
                  mode="score", device="cpu", dtype="fp32", batch_size=12, max_new_tokens=8)
    return run_mod.RunConfig(**(fields | overrides))


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    """The tiny model as behavioral.inference.models.load gives it: (model, tokenizer, info)."""
    return models.load(str(tiny_model_dir), "cpu", "fp32")


def _rows(run_dir):
    key = ["unit_id", "event_id"]
    columns = ["intensity", "expected_intensity", "numeric_mass", "score_intensity"]
    return results(run_dir).sort_values(key).reset_index(drop=True)[columns]


def test_steered_run_steers_a_whole_suite_run_and_marks_its_manifest(tiny_model_dir, loaded, tmp_path):
    model = loaded[0]
    hooks_before = _hook_ids(model)
    config = _config(tiny_model_dir)
    run_mod.run(config, tmp_path / "plain", progress=False, loaded=loaded)
    direction = _direction(model) * 3
    steering.steered_run(config, tmp_path / "zero", loaded, 1, direction, coef=0.0, progress=False)
    steering.steered_run(config, tmp_path / "eight", loaded, 1, direction, coef=8.0, progress=False)
    assert _hook_ids(model) == hooks_before
    plain = _rows(tmp_path / "plain")
    pd.testing.assert_frame_equal(plain, _rows(tmp_path / "zero"), check_exact=True)
    assert not plain["expected_intensity"].equals(_rows(tmp_path / "eight")["expected_intensity"])  # it steers
    # the configuration comes back from the run directory (device and batch size are not stored)
    restored = run_mod.RunConfig.from_run_dir(tmp_path / "zero", device="cpu", batch_size=12)
    assert restored == dataclasses.replace(config, dtype="float32")
    manifest = read_manifest(tmp_path / "zero").model
    assert manifest["steering"]["coef"] == 0.0 and "+steer:" in manifest["model_hash"]
    assert manifest["steering"]["fingerprint"] != read_manifest(tmp_path / "eight").model["steering"]["fingerprint"]
    with pytest.raises(RunDirError, match="model_hash"):
        run_mod.run(config, tmp_path / "zero", progress=False, loaded=loaded)  # resuming it unsteered is refused
    with pytest.raises(RunDirError, match="model_hash"):  # and so is resuming it with another steering
        steering.steered_run(config, tmp_path / "zero", loaded, 1, direction, coef=3.0, progress=False)
    assert _hook_ids(model) == hooks_before


def test_a_run_estimate_charges_a_ragged_last_batch_its_share_not_a_whole_batch():
    estimate = RunEstimate(prompts=36, batches=2, timed_prompts=32, seconds_timed=80.0)  # batches of 32 and 4
    assert estimate.seconds == 90.0
    assert estimate.describe(2) == ("2 runs × 36 prompts in 2 batches; the first (32 prompts) took 80.0 s: "
                                    "estimated 3 min")


def test_the_random_control_direction_lies_in_the_span_of_the_states_is_seeded_and_keeps_the_norm():
    rng = np.random.default_rng(0)
    basis = rng.standard_normal((3, 40))
    states = rng.standard_normal((12, 3)) @ basis + 5.0  # 12 states in a 3-dim affine subspace of 40 dims
    control = steering.span_direction(states, norm=2.5, seed=19)
    np.testing.assert_allclose(np.linalg.norm(control), 2.5, rtol=1e-6)
    coefficients, *_ = np.linalg.lstsq(basis.T, control, rcond=None)
    np.testing.assert_allclose(basis.T @ coefficients, control, atol=1e-5)  # within the states' (centred) span
    np.testing.assert_array_equal(control, steering.span_direction(states, 2.5, seed=19))
    assert not np.array_equal(control, steering.span_direction(states, 2.5, seed=5))
    with pytest.raises(ValueError, match="2 distinct states"):
        steering.span_direction(np.ones((4, 40)), 1.0, seed=0)


def test_a_sweep_runs_coefficient_zero_once_and_every_other_coefficient_at_every_layer():
    conditions = steering.sweep_conditions([1, 2], [-1.0, 0.0, 1.0], project=True)
    assert [(c.layer, c.coef, c.project) for c in conditions] == [
        (None, None, False), (1, -1.0, False), (1, 0.0, False), (1, 1.0, False), (1, None, True),
        (2, -1.0, False), (2, 1.0, False), (2, None, True)]
    controlled = steering.sweep_conditions([1, 2], [-1.0, 0.0, 1.0], project=True, n_random=1)
    assert [c.label for c in controlled if c.random] == ["L1 project random", "L2 project random"]
    assert [c for c in controlled if not c.random] == conditions
    matched = steering.sweep_conditions([1], [0.0], project=True, n_random=2, n_matchings=2)
    assert [c.label for c in matched] == ["unsteered", "L1 +0", "L1 project", "L1 project random",
                                          "L1 project random 2", "L1 project matching 0", "L1 project matching 1"]
    assert [c.control for c in matched] == [False, False, False, True, True, True, True]

    summary = pd.DataFrame([
        {"condition": c.label, "layer": -1 if c.layer is None else c.layer,
         "coef": np.nan if c.coef is None else c.coef, "project": c.project, "random": c.random,
         "matching": -1 if c.matching is None else c.matching, "category": "religion",
         "setting": SETTING, "measure": "expected_intensity",
         "delta": 0.5 if c.layer is None else (c.coef or 0.0) + 10 * c.layer + c.random,
         "ci_low": -0.2, "ci_high": 0.2, "refusal_rate": 0.0, "non_numeric_mass": 0.0, "mean_rating": 50.0, "note": "",
         "n_events": 3}
        for c in controlled])
    figure = sweep_figure(summary, {"category": "religion", "setting": SETTING}, protocol.PANELS)
    delta_panel = figure.axes[0]
    curves = {line.get_label(): list(zip(line.get_xdata(), line.get_ydata())) for line in delta_panel.get_lines()}
    assert curves["layer 1"] == [(-1.0, 9.0), (0.0, 10.0), (1.0, 11.0)]  # its own zero run
    assert curves["layer 2"] == [(-1.0, 19.0), (0.0, 0.5), (1.0, 21.0)]  # the unsteered point at 0
    points = sorted(tuple(p) for c in delta_panel.collections for p in c.get_offsets())
    assert [y for _, y in points] == [10.0, 11.0, 20.0, 21.0]  # projections (x) and their random controls (o)
    (legend,) = figure.legends  # one, below every panel
    assert "projection of a random direction" in [t.get_text() for t in legend.get_texts()]
    assert [t.get_text() for t in delta_panel.get_xticklabels()] == ["-1", "0", "1", "proj."]
    summary.loc[summary["condition"] == "L2 +1", "delta"] = np.nan  # every cell the same answer
    figure = sweep_figure(summary, {"category": "religion", "setting": SETTING}, protocol.PANELS)
    delta_panel = figure.axes[0]
    marks = [c for c in delta_panel.collections if c.get_label() == "δ undefined"]
    assert len(marks) == 1 and marks[0].get_offsets()[:, 0].tolist() == [1.0]
    assert "δ undefined" in [t.get_text() for t in figure.legends[0].get_texts()]


def test_steering_sweep_reports_delta_and_rates_and_coefficient_zero_matches(tiny_model_dir, loaded, tmp_path,
                                                                            capsys):
    config = _config(tiny_model_dir)
    direction = _direction(loaded[0]) * 2
    rewrites = tmp_path / "capture" / REWRITES  # a cache another run made: copied into every condition's run
    rewrites.parent.mkdir()
    rewrites.write_text("")
    conditions = steering.sweep_conditions([1], [0.0, 8.0])
    rows = steering.run_conditions(config, tmp_path / "sweep", loaded, {0: direction, 1: direction}, conditions,
                                   protocol.read_rows, (REWRITES,), rewrites.parent, progress=True)
    assert list(dict.fromkeys(rows["condition"])) == ["unsteered", "L1 +0", "L1 +8"]
    assert all((tmp_path / "sweep" / c.folder / REWRITES).is_file() for c in conditions)
    assert len(rows) == 3 * 36  # 36 cells of one event each
    assert "steering: 3 runs × 36 prompts in 3 batches; the first (12 prompts)" in capsys.readouterr().out
    check = steering.zero_coefficient_check(rows, protocol.KEY, protocol.RESULT_COLUMNS)
    assert check["identical"].all() and len(check) == 1
    again = steering.run_conditions(config, tmp_path / "sweep", loaded, {1: direction}, conditions,
                                    protocol.read_rows)  # resumed
    pd.testing.assert_frame_equal(again, rows)
    last = steering.run_conditions(config, tmp_path / "sweep", loaded, {"blocks.1.hook_resid_post": direction},
                                   steering.sweep_conditions([-1], [8.0])[1:], protocol.read_rows)
    steered = rows[rows["condition"] == "L1 +8"].reset_index(drop=True)  # -1 is the last block: the same steering
    assert set(last["layer"]) == {1} and list(last["condition"].unique()) == ["L-1 +8"]
    pd.testing.assert_frame_equal(last.drop(columns="condition"), steered.drop(columns="condition"))
    with pytest.raises(ValueError, match="no direction for layer -1; have \\[0\\]"):
        steering.run_conditions(config, tmp_path / "sweep", loaded, {0: direction}, conditions[:1] + [
            steering.Condition(-1, 8.0)], protocol.read_rows)
    summary = summarize(protocol.measured(rows), protocol, n_permutations=200)
    assert set(summary["measure"]) == {"intensity", "expected_intensity"}
    assert len(summary) == 6
    expected = summary[summary["measure"] == "expected_intensity"].set_index("condition")
    assert np.isfinite(expected.loc["unsteered", "delta"])
    exact = summary["p_exact"].dropna().to_numpy() * 120  # religion: the p over all 5! matchings
    assert len(exact) and np.allclose(exact, exact.round())
    assert expected.loc["L1 +0", "delta_change"] == 0 and expected.loc["L1 +0", "non_numeric_mass_change"] == 0
    assert expected.loc["L1 +8", "delta_change"] != 0 and expected.loc["L1 +8", "mean_rating_change"] != 0
    (name, title, figure), = figures(summary, protocol.BLOCK, protocol.PANELS)
    assert name == f"steering_religion_{SETTING}" and len(figure.axes) == 2 * 4  # two measures × four panels


def _synthetic_final_store(root, d: int = 32, n_hooks: int = 3, seed: int = 0):
    """A final_mean store for religion with a planted in-group offset per hook; "a person" cells sit far away."""
    rng = np.random.default_rng(seed)
    names = get_category("religion").with_unspecified
    offsets = rng.normal(size=(n_hooks, d)) * 3
    cells, vectors, counts = [], [], []
    for p in names:
        for x in names:
            v = rng.normal(size=(n_hooks, d)) * 0.3
            if "a person" in (p, x):
                v += 50.0  # would ruin the direction if "a person" were not excluded
            elif p == x:
                v += offsets
            cells.append((SETTING, "religion", p, x))
            vectors.append(v)
            counts.append(int(rng.integers(1, 6)))
    cell = ["setting", "category", "perceiver", "experiencer"]
    index = pd.DataFrame(cells, columns=cell).assign(count=counts)
    half = len(index) // 2  # two shards, as two processes would write
    for key, rows in (("r000-000001", slice(0, half)), ("r001-000001", slice(half, None))):
        activation_store.write_shard(root, "final_mean", key, np.stack(vectors[rows]),
                                     index.iloc[rows].reset_index(drop=True))
    activation_store.write_meta(root, {"hooks": hook_names(n_hooks - 1), "layers": None, "d_model": d, "cell": cell})
    return offsets, index, np.stack(vectors).astype(np.float16).astype(np.float64)


def test_mean_difference_is_the_count_weighted_pooled_difference_and_needs_both_sides():
    means = np.arange(2 * 4 * 3, dtype=np.float64).reshape(2, 4, 3) ** 1.5  # hooks × cells × d
    counts = np.array([1, 3, 2, 5])
    inside, outside = np.array([True, True, False, False]), np.array([False, False, True, False])  # cell 3 in neither
    got = steering.mean_difference(means, counts, inside, outside)
    np.testing.assert_allclose(got, (1 * means[:, 0] + 3 * means[:, 1]) / 4 - means[:, 2], rtol=1e-12)
    unit = steering.unit_rows(np.vstack([got[0], np.zeros(3)]))
    np.testing.assert_allclose(unit[0], got[0] / np.linalg.norm(got[0]))
    assert not unit[1].any()  # a zero row stays zero
    with pytest.raises(ValueError, match="needs cells on both sides, got 0 inside and 1 outside"):
        steering.mean_difference(means, counts, np.zeros(4, bool), outside)
    table = steering.direction_table(got.astype(np.float32), means, ["hook_embed", "blocks.0.hook_resid_post"])
    assert table["layer"].tolist() == [-1, 0] and np.isnan(table["cos_previous_layer"].iloc[0])
    np.testing.assert_allclose(table["mean_state_norm"], np.linalg.norm(means.mean(axis=1), axis=1))


def test_ingroup_direction_recovers_a_planted_offset(tmp_path):
    offsets, index, vectors = _synthetic_final_store(tmp_path)
    store = activation_store.load(tmp_path)
    direction = protocol.ingroup_direction(store, "religion", SETTING)
    assert direction.shape == offsets.shape and direction.dtype == np.float32
    cos = (direction * offsets).sum(1) / np.linalg.norm(direction, axis=1) / np.linalg.norm(offsets, axis=1)
    assert cos.min() > 0.99
    # exactly the count-weighted pooled difference
    inside = (index.perceiver == index.experiencer) & (index.perceiver != "a person")
    outside = (index.perceiver != index.experiencer) & (index.perceiver != "a person") & \
        (index.experiencer != "a person")
    w = index["count"].to_numpy(float)

    def pooled(mask):
        return (w[mask, None, None] * vectors[mask]).sum(0) / w[mask].sum()

    np.testing.assert_allclose(direction, pooled(inside.to_numpy()) - pooled(outside.to_numpy()), rtol=1e-5, atol=1e-5)
    unit = protocol.ingroup_direction(store, "religion", SETTING, unit=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=1e-6)
    picked = steering.layer_directions(direction, store.hooks, [1, 0])
    assert list(picked) == [1, 0] and np.array_equal(picked[1], direction[2])
    with pytest.raises(activation_store.ActivationStoreError, match="layer: block 7 was not captured"):
        steering.layer_directions(direction, store.hooks, [7])
    assert np.array_equal(steering.layer_directions(direction, store.hooks, [-1])[-1], picked[1])
    assert [steering.hook_row(store.hooks, x) for x in (-1, "blocks.1.hook_resid_post", "last", "hook_embed")] == \
        [2, 2, 2, 0]
    with pytest.raises(activation_store.ActivationStoreError, match="names 2 hooks; expected one"):
        steering.hook_row(store.hooks, "0-1")


def test_the_protocol_reads_one_category_and_setting_defaulting_to_the_runs_first():
    config = {"options": {"categories": ["race", "religion"], "settings": ["P0S1T0"]}}
    assert protocol.block(config, {}) == {"category": "race", "setting": "P0S1T0"}
    assert protocol.block(config, {"category": "religion"}) == {"category": "religion", "setting": "P0S1T0"}
    with pytest.raises(ValueError, match="--where category: expected one value"):
        protocol.block(config, {"category": ["race", "religion"]})
    with pytest.raises(ValueError, match="--where perceiver: an intergroup steering or patching study selects"):
        protocol.block(config, {"perceiver": "a Jew"})
