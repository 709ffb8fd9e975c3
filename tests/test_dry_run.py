"""The sweep's dry run costs a small share of the sweep: it says its own cost before it starts, loads each
model once, times at most its declared sample of each run after an untimed warm-up, and extrapolates each run from
its own prompts (per position of the run's pools, decoding by the batches the run forms); `--no-calibrate` loads
nothing."""

from __future__ import annotations

import functools
import itertools

import pytest

from behavioral.runner import estimate
from behavioral.cli import sweep as sweep_cli
from behavioral.cli.commands import main
from behavioral.runner.estimate import Forward, SampledRun, StepCost
from behavioral.runner.run import Runner
from behavioral.sweep.config import read_sweep
from behavioral.sweep.plan import SAMPLE, WARM_UP, describe_plan, plan_sweep
from tests.test_sweep import INTERGROUP, JAEM, SCM, Loads, _toml, second_model_dir  # noqa: F401 (a fixture)

TWO_SETTINGS = """
[suite.intergroup]
mode = "score"
options = { categories = ["religion"], settings = ["P0S0T0"] }

[suite.intergroup.settings.two]
options = { limit_events = 2 }

[suite.intergroup.settings.four]
options = { limit_events = 4 }
"""


class Events:
    """What a dry run did, in order: ("say", line), ("load", model) and ("rows", prompts) for each Runner.rows call."""

    def __init__(self, monkeypatch):
        self.log: list[tuple[str, object]] = []
        loads = Loads()

        def load(spec, *args):
            self.log.append(("load", spec))
            return loads(spec, *args)

        rows = Runner.rows

        def counted(runner, units):
            self.log.append(("rows", sum(len(u.items) for u in units) * runner.config.samples))
            return rows(runner, units)

        monkeypatch.setattr(Runner, "rows", counted)
        self.load = load

    def say(self, line: str) -> None:
        self.log.append(("say", line))

    def of(self, kind: str) -> list:
        return [value for k, value in self.log if k == kind]


def test_the_dry_run_says_its_cost_first_loads_each_model_once_and_times_at_most_its_sample(
        tmp_path, long_model_dir, second_model_dir, monkeypatch):
    sweep = read_sweep(_toml(tmp_path, [("a", long_model_dir), ("b", second_model_dir)], INTERGROUP, SCM, JAEM))
    events = Events(monkeypatch)
    planned = plan_sweep(sweep, load=events.load, say=events.say)
    assert events.log[0][0] == "say" and len(events.of("say")) == 1
    cost = events.of("say")[0]
    assert cost.startswith(f"dry run: loads a, b once each, warms them up on {WARM_UP} prompt, then times 24 of the "
                           f"192 prompts left ({SAMPLE} of each of 6 runs, 12.5%)")
    assert events.of("load") == [str(long_model_dir), str(second_model_dir)]
    per_model = [list(g) for is_load, g in itertools.groupby(events.log[1:], key=lambda e: e[0] == "load")
                 if not is_load]
    assert [sum(n for _, n in calls) for calls in per_model] == [WARM_UP + 3 * SAMPLE] * 2  # 8 of jaem's: 2 x 4
    assert all(p.seconds > 0 and p.result_bytes > 0 and f"{SAMPLE} of {p.rows} prompts timed" in p.how
               for p in planned)
    jaem = next(p for p in planned if p.name == "a/jaem")
    assert "replies up to" in jaem.how and "replies" not in planned[0].how  # score runs decode nothing
    assert not (tmp_path / "sweep").exists()


def test_each_estimate_scales_with_its_own_runs_prompts(tmp_path, long_model_dir, monkeypatch):
    ticks = itertools.count()
    monkeypatch.setattr(estimate, "perf_counter", lambda: next(ticks) * 0.01)  # every clock reading 10 ms on
    sweep = read_sweep(_toml(tmp_path, [("a", long_model_dir)], TWO_SETTINGS))
    two, four = plan_sweep(sweep, say=lambda line: None)
    assert (two.rows, four.rows) == (72, 144)
    # twice the prompts, whose pools share more of their prefixes (4 events under each pair of identities, not 2)
    assert 1.4 < four.seconds / two.seconds <= 2
    assert two.result_bytes < four.result_bytes < 2 * two.result_bytes  # a part's own bytes, then each row's


def _sampled(rows: int, forwards: tuple[Forward, ...], batch_size: int = 4) -> SampledRun:
    """A run of `rows` one-sample items, 10 positions an item, whose 4 timed prompts (40 positions) took 1 s."""
    return SampledRun(rows, rows, batch_size, 10.0, 4, 40, 1.0, forwards, 100.0)


def test_decoding_costs_each_batch_its_longest_reply_and_each_row_its_steps():
    prompt = Forward(4, 10, 0.0, 0.2)
    steps = tuple(Forward(rows, 1, 0.2 + 0.1 * k, 0.3 + 0.1 * k) for k, rows in enumerate([4, 4, 2, 1]))
    sampled = _sampled(8, (prompt, *steps))
    # 0.6 s besides decoding, per position; 0.4 s of decoding over 11 row-steps
    assert sampled.seconds(StepCost(0.0, 1.0)) == pytest.approx(0.6 * 2 + 0.4 * 2)
    # a fixed step cost alone: the run's 2 batches each pay the sample's 4 steps
    assert sampled.seconds(StepCost(1.0, 0.0)) == pytest.approx(0.6 * 2 + 0.1 * 4 * 2)
    assert _sampled(80, (prompt, *steps)).seconds(StepCost(1.0, 0.0)) == pytest.approx(0.6 * 20 + 0.1 * 4 * 20)
    assert sampled.describe() == "4 of 8 prompts timed, replies up to 5 tokens"
    scored = _sampled(8, (Forward(1, 30, 0.0, 0.1), Forward(4, 12, 0.1, 0.5)))  # a prefix fill, then the prompts
    assert scored.seconds(StepCost()) == pytest.approx(2.0) and scored.describe() == "4 of 8 prompts timed"


def test_no_calibrate_plans_without_a_model(tmp_path, long_model_dir, capsys, monkeypatch):
    loads = Loads()
    monkeypatch.setattr("behavioral.inference.models.load", loads)
    monkeypatch.setattr(sweep_cli, "plan_sweep", functools.partial(plan_sweep, load=loads))
    path = _toml(tmp_path, [("a", long_model_dir)], INTERGROUP, SCM)
    assert main(["sweep", str(path), "--dry-run", "--no-calibrate"]) == 0
    out = capsys.readouterr().out
    assert loads.calls == [] and "dry run:" not in out and "about" not in out
    assert out.splitlines()[-1] == "2 runs left, 88 prompts" and not (tmp_path / "sweep").exists()
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    assert "load no model, time nothing" in " ".join(capsys.readouterr().out.split())


def test_a_plan_without_estimates_reads_as_prompts_and_states(tmp_path, long_model_dir):
    sweep = read_sweep(_toml(tmp_path, [("a", long_model_dir)], SCM))
    text = describe_plan(sweep, plan_sweep(sweep, calibrate=False))
    assert text.splitlines()[1:] == ["  a/scm: 16 prompts, new", "1 run left, 16 prompts"]
