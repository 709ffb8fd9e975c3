"""The run loop calls one declared interface (behavioral.inference.backend): the engine and vLLM implement each of its
calls with the same parameters, every backend a run may name has a kind, and the loop never branches on a name."""

from __future__ import annotations

import inspect
from pathlib import Path

from behavioral.inference.backend import BACKENDS, Backend, BackendKind
from behavioral.inference.engine import Engine
from behavioral.inference.vllm.engine import VllmEngine
from behavioral.runner import config

CALLS = ("hooked", "generate", "score", "generate_and_score")


def _parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_every_backend_a_run_names_has_a_kind_and_no_other():
    assert set(BACKENDS) == set(config.BACKENDS)


def test_the_engine_and_vllm_take_the_interfaces_parameters_in_its_order():
    for implementation in (Engine, VllmEngine):
        for call in CALLS:
            declared = _parameters(getattr(Backend, call))
            # the engine's hook block takes more (interventions for patching and steering) after the tracer
            assert _parameters(getattr(implementation, call))[:len(declared)] == declared, (implementation, call)


def test_each_kind_implements_every_member_of_the_kind_protocol():
    members = [name for name in dir(BackendKind) if not name.startswith("_")] + ["renders_before_loading"]
    for kind in BACKENDS.values():
        for name in members:
            assert hasattr(kind, name), (kind, name)
        for name in ("device", "load", "start", "writer", "origin"):
            assert _parameters(getattr(type(kind), name)) == _parameters(getattr(BackendKind, name)), (kind, name)


def test_the_run_loop_never_branches_on_a_backends_name():
    runner = Path(__file__).resolve().parents[1] / "behavioral" / "runner"
    found = [f"{p.name}:{i}" for p in runner.rglob("*.py") for i, line in enumerate(p.read_text().splitlines(), 1)
             if "backend ==" in line or "backend !=" in line]
    assert found == []
