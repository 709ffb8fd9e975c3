"""A suite gets the patching study by declaring its identity slot (interp.patching.slot.SlotPatching): a toy suite whose
persona rates a target of its own or the other group runs `interp patch` on the tiny model, and the study's numbers
are the ones its rule defines (the unpatched gap from the run's own scores, the sources the swap rule names, the gap
closed from the per-unit gaps)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from behavioral.analysis.paired import closed
from behavioral.inference.answer_spec import AnswerSpec
from behavioral.inference.prompt import Prompt, from_templates
from behavioral.suite.registry import registered
from behavioral.runner.run import RunConfig, run
from behavioral.rundir.parts import read_results
from behavioral.analysis.studies import get_study
from behavioral.analysis.study import run_study
from behavioral.suite.protocol import Answer, Suite
from interp.patching.slot import SlotPatching

GROUP = {"Ann": "north", "Bea": "north", "Cal": "south", "Dov": "south"}
BASELINE = "someone"
STORIES = ("lost a dog", "won a prize", "missed a train")
SCALE = AnswerSpec.integers(0, 3)


@dataclass(frozen=True)
class Rating:
    persona: str
    target: str
    story: str

    @property
    def item_id(self) -> str:
        return f"{self.persona}|{self.target}|{self.story}"

    @property
    def answers(self) -> AnswerSpec:
        return SCALE

    @property
    def fields(self) -> dict[str, str]:
        return {"persona": self.persona, "target": self.target, "story": self.story}

    def prompt(self) -> Prompt:
        return from_templates((("system", "You are {persona}. Answer with one digit."),
                               ("user", "{target} {story}. How sad, 0 to 3?")),
                              self.fields, ("persona", "target"))

    def parse(self, text: str) -> Answer:
        digit = text.strip()[:1]
        return Answer(int(digit), float(digit)) if digit in "0123" and digit else Answer(None)


class Pals(Suite):
    name = "pals"
    description = "toy: personas rate a target of their own or the other group"
    fields = ("persona", "target", "story")
    protocols = {"patch": SlotPatching(slot="persona", baseline=BASELINE, compared="target", unit="story")}

    def groups(self, data):
        yield "all", [Rating(p, t, s) for p in (*GROUP, BASELINE) for t in GROUP for s in STORIES]

    def cell_labels(self, cells: pd.DataFrame) -> pd.DataFrame:
        same = [GROUP[p] == GROUP[t] if p in GROUP else pd.NA for p, t in zip(cells["persona"], cells["target"])]
        return pd.DataFrame({"ingroup": pd.array(same, dtype="boolean")}, index=cells.index)


class Plain(Pals):
    name = "plain"
    protocols = {}


@pytest.fixture(scope="module")
def pals_run(tiny_model_dir, tmp_path_factory):
    """A score-mode run of the toy suite on the tiny model, the suite registered while the module's tests run."""
    with registered(Pals()):
        out = tmp_path_factory.mktemp("pals") / "run"
        run(RunConfig(suite="pals", model=str(tiny_model_dir), mode="score", device="cpu", dtype="fp32",
                      batch_size=8), out, progress=False)
        yield out


def _patch(run_dir, out, **options):
    study = get_study("patch")
    defaults = dict(layers="0,last", layer_step=1, limit_events=3, sweep_events=0, device="cpu", dtype="fp32")
    run_study(study, [run_dir], study.Options(**(defaults | options)), out, progress=False)
    return pd.read_csv(out / "gap_by_layer.csv"), pd.read_csv(out / "gap_prompts.csv")


def test_a_suite_that_declares_its_slot_gets_the_patching_study(pals_run, tmp_path):
    table, prompts = _patch(pals_run, tmp_path / "patch")
    assert sorted(table["mode"].unique()) == ["person", "swap"] and sorted(table["layer"].unique()) == [0, 1]
    assert (table["n_events"] == len(STORIES)).all() and (table["n_prompts"] == 16 * len(STORIES)).all()

    # the unpatched gap is the run's own: per story, in-group minus out-group mean expected answer
    rows = read_results(pals_run)
    rows = rows[rows["persona"] != BASELINE]
    rows = rows.assign(ingroup=[GROUP[p] == GROUP[t] for p, t in zip(rows["persona"], rows["target"])])
    by_story = rows.groupby(["story", "ingroup"])["expected"].mean().unstack()
    gaps = (by_story[True] - by_story[False]).to_numpy()
    assert table["gap_unpatched"].to_numpy() == pytest.approx(np.full(len(table), gaps.mean()), abs=1e-5)

    # the sources follow the rule: "someone" for person; swap makes an in-group item out-group and back
    person = prompts[prompts["mode"] == "person"]
    assert (person["source_value"] == BASELINE).all()
    swap = prompts[prompts["mode"] == "swap"]
    flipped = [GROUP[s] == GROUP[t] for s, t in zip(swap["source_value"], swap["target"])]
    assert (np.array(flipped) != swap["ingroup"].to_numpy()).all()
    out_group = swap[~swap["ingroup"]]
    assert (out_group["source_value"] == out_group["target"]).all()

    # the gap closed is paired by story from the per-prompt scores
    for (mode, layer), part in prompts.groupby(["mode", "layer"]):
        per = {c: part.groupby(["unit", "ingroup"])[c].mean().unstack() for c in ("expected_clean", "expected")}
        before, after = ((per[c][True] - per[c][False]).to_numpy() for c in ("expected_clean", "expected"))
        row = table[(table["mode"] == mode) & (table["layer"] == layer)].iloc[0]
        expected = closed(before, after)
        assert row["gap_closed_points"] == pytest.approx(expected.points, abs=1e-9)
        assert row["gap_closed_points_low"] == pytest.approx(expected.points_low, abs=1e-9)
        assert row["gap_patched"] == pytest.approx(after.mean(), abs=1e-9)


def test_a_suite_without_a_patching_protocol_is_refused_naming_it(tiny_model_dir, tmp_path):
    with registered(Plain()):
        out = tmp_path / "run"
        run(RunConfig(suite="plain", model=str(tiny_model_dir), mode="score", device="cpu", dtype="fp32"), out,
            progress=False)
        with pytest.raises(ValueError, match="a run of suite 'plain', which declares no patch protocol; patch runs on intergroup or pals runs"):
            _patch(out, tmp_path / "patch")
        assert not (tmp_path / "patch").exists()
