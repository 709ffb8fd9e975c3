"""The project's import graph read from its own source (ast, nothing imported) and held against the layer picture of
docs/ARCHITECTURE.md: the layers are folders, each module's layer is the folder it lives in, and the graph gives the
imports that point upward, the import cycles among modules and the imports made inside functions (which hide a cycle
from the module level). An import under `if TYPE_CHECKING:` never runs, but it still names a module of another
layer, so it counts as a module-level import: a protocol names only types of its own layer or those below.
`python -m tests.import_graph` prints the counts and every violation."""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("behavioral", "activations", "interp")
# Lowest first, one folder each: a module may import its own layer and those below it, never one above. `behavioral`
# itself (its __init__, the public face) stands on top and names the others lazily.
LAYERS = ("behavioral.core", "behavioral.report", "behavioral.rundir", "behavioral.inference", "behavioral.suite", "activations",
          "behavioral.runner", "behavioral.sweep", "behavioral.analysis", "interp", "behavioral.suites",
          "behavioral.cli", "behavioral")
_TYPE_CHECKING = ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def layer_of(module: str) -> str:
    """The layer of a module: the folder of LAYERS it lives in; a module directly in behavioral/ (none should be) is
    its own name, in no layer."""
    parts = module.split(".")
    if parts[0] != "behavioral" or len(parts) == 1:
        return parts[0]
    return f"behavioral.{parts[1]}"


@dataclass(frozen=True)
class Graph:
    """Internal imports per module: at module level (`edges`), inside functions (`deferred`), and the types named
for annotations only (`type_refs`, under `if TYPE_CHECKING:`)."""

    modules: frozenset[str]
    edges: dict[str, frozenset[str]]
    deferred: dict[str, frozenset[str]]
    type_refs: dict[str, frozenset[str]]

    def module_level(self) -> dict[str, frozenset[str]]:
        """The imports at module level, annotation-only ones included."""
        return {m: self.edges.get(m, frozenset()) | self.type_refs.get(m, frozenset()) for m in self.modules}

    def upward(self, deferred: bool = False) -> list[tuple[str, str]]:
        """The imports (at module level with annotation-only ones, or with `deferred` those inside functions) from a
        module to one in a higher layer, sorted."""
        edges = self.deferred if deferred else self.module_level()
        return sorted((a, b) for a, targets in edges.items() for b in targets
                      if LAYERS.index(layer_of(a)) < LAYERS.index(layer_of(b)))

    def outside_layers(self) -> list[str]:
        """The modules in no layer's folder (a module directly in behavioral/), sorted."""
        return sorted(m for m in self.modules if layer_of(m) not in LAYERS)

    def cycles(self, deferred: bool = False) -> list[list[str]]:
        """The strongly connected components of more than one module (Tarjan) under module-level imports (annotation
        ones included), or with `deferred` under every import (the cycles a function-level import hides); each
        sorted, sorted by their first module."""
        edges = {m: targets | (self.deferred.get(m, frozenset()) if deferred else frozenset())
                 for m, targets in self.module_level().items()}
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        found = []

        def connect(v: str) -> None:
            index[v] = low[v] = len(index)
            stack.append(v)
            for w in edges[v]:
                if w not in index:
                    connect(w)
                    low[v] = min(low[v], low[w])
                elif w in stack:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                component = []
                while not component or component[-1] != v:
                    component.append(stack.pop())
                if len(component) > 1:
                    found.append(sorted(component))

        for module in sorted(self.modules):
            if module not in index:
                connect(module)
        return sorted(found)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def read_graph(root: Path = ROOT) -> Graph:
    """The internal import graph of PACKAGES under `root` (absolute imports; the project uses no relative ones)."""
    paths = {_module_name(p): p for package in PACKAGES for p in sorted((root / package).rglob("*.py"))}

    def resolve(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    deferred: dict[str, set[str]] = defaultdict(set)
    type_refs: dict[str, set[str]] = defaultdict(set)
    for module, path in paths.items():
        def visit(node: ast.AST, inside: bool, typing_only: bool = False) -> None:
            for child in ast.iter_child_nodes(node):
                nested = inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                typed = typing_only or (isinstance(child, ast.If) and ast.unparse(child.test) in _TYPE_CHECKING)
                names = []
                if isinstance(child, ast.Import):
                    names = [alias.name for alias in child.names]
                elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                    # `from package import submodule` reads the submodule; `from module import name`, the module
                    names = [f"{child.module}.{alias.name}" if f"{child.module}.{alias.name}" in paths else child.module
                             for alias in child.names]
                for name in names:
                    target = resolve(name) if name.split(".")[0] in PACKAGES else None
                    if target and target != module:
                        (type_refs if typed else deferred if nested else edges)[module].add(target)
                visit(child, nested, typed)

        visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return Graph(frozenset(paths), *({k: frozenset(v) for k, v in found.items()}
                                     for found in (edges, deferred, type_refs)))


def summary(graph: Graph) -> dict[str, int]:
    """The counts docs/ARCHITECTURE.md tracks."""
    return {"modules": len(graph.modules), "imports": sum(map(len, graph.edges.values())),
            "upward": len(graph.upward()), "cycles": len(graph.cycles()),
            "hidden_cycles": len(graph.cycles(deferred=True)),
            "deferred": sum(map(len, graph.deferred.values())), "deferred_files": len(graph.deferred),
            "deferred_upward": len(graph.upward(deferred=True)),
            "type_refs": sum(map(len, graph.type_refs.values())), "outside_layers": len(graph.outside_layers())}


def main() -> None:
    """Print the counts and every violation."""
    graph = read_graph()
    print(" ".join(f"{k}={v}" for k, v in summary(graph).items()))
    for module in graph.outside_layers():
        print(f"in no layer: {module}")
    for a, b in graph.upward():
        print(f"upward: {a} ({layer_of(a)}) -> {b} ({layer_of(b)})")
    for component in graph.cycles():
        print("cycle: " + " <-> ".join(component))
    for a, b in graph.upward(deferred=True):
        print(f"upward inside a function: {a} -> {b}")
    for component in graph.cycles(deferred=True):
        print("cycle through a function-level import: " + " <-> ".join(component))
    for a, targets in sorted(graph.type_refs.items()):
        print(f"types named for annotations: {a} -> {', '.join(sorted(targets))}")


if __name__ == "__main__":
    main()
