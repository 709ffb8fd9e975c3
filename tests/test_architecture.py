"""The layers of docs/ARCHITECTURE.md held on the import graph read from the source (tests/import_graph.py): every
module lives in a layer's folder, no import points upward or closes a cycle (at module level, annotation-only imports
included, or inside a function), and nothing below the suites names one."""

from __future__ import annotations

from tests.import_graph import LAYERS, layer_of, read_graph

DEFERRED = 14  # internal imports made inside functions (none hides a cycle); lower it, never raise it


def test_every_module_lives_in_a_layers_folder():
    assert read_graph().outside_layers() == []


def test_no_import_points_upward():
    graph = read_graph()
    assert graph.upward() == []
    assert graph.upward(deferred=True) == []


def test_no_import_cycle_even_through_a_function_level_import():
    graph = read_graph()
    assert graph.cycles() == []
    assert graph.cycles(deferred=True) == []
    assert sum(map(len, graph.deferred.values())) <= DEFERRED


def test_interp_and_activations_never_name_a_suite():
    graph = read_graph()
    named = [(a, b) for edges in (graph.edges, graph.deferred, graph.type_refs) for a, targets in edges.items()
             for b in targets
             if layer_of(a) in ("interp", "activations") and layer_of(b) == "behavioral.suites"]
    assert named == []


def test_the_layers_are_read_as_the_page_draws_them():
    assert [layer_of(m) for m in ("behavioral.core.files", "behavioral.report.blocks", "behavioral.rundir.manifest",
                                  "behavioral.inference.vllm.engine", "behavioral.suite.protocol",
                                  "activations.capture", "behavioral.runner.reader", "behavioral.sweep.plan",
                                  "behavioral.analysis.study", "interp.steering.study",
                                  "behavioral.suites.intergroup.steering", "behavioral.cli.interp", "behavioral")
            ] == list(LAYERS)
    graph = read_graph()
    assert ("interp.steering", "activations.capture") in {(a, b) for a, t in graph.edges.items() for b in t}
    # an annotation-only import is held to the layers too
    assert "behavioral.report.blocks" in graph.type_refs["behavioral.suite.protocol"]
