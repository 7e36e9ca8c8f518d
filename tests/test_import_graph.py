"""No import circle in `orchestrator/`, type hints included: the module graph, built with `ast`,
has no strongly connected component of more than one module.

What is an edge (module A -> module B): every `import` and `from ... import` A's text holds,
read by support.modules.imports: at the top, under `if TYPE_CHECKING:` (a type is knowledge of the
module it comes from, whether or not Python loads it) and inside a function (a lazy import kept
for start-up time is still knowledge; counting them all keeps the rule one sentence). `from P
import x` is an edge to the submodule P.x where there is one, else to P itself, so a package's
`__init__.py` re-exports are the package's edges. The parent packages Python loads before a
submodule are its mechanics, not what the module's text names: they are no edge.

The rehearsal stand-ins' trees (`orchestrator/rehearsal/trees/`) are programs copied to hosts, not
modules of the graph; the package that declares them (`orchestrator/rehearsal/`) is a sink: its
edges stay inside it, so no circle can pass through it, and no engine module has an edge into it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from support.modules import Module, imports, orch_modules, parse

Graph = dict[str, set[str]]

def graph_of(modules: Iterable[Module]) -> tuple[Graph, dict[tuple[str, str], str]]:
    """The import graph between `modules`, and where each edge is written (path:line)."""
    modules = list(modules)
    names = {module.name for module in modules}
    graph: Graph = {module.name: set() for module in modules}
    where: dict[tuple[str, str], str] = {}
    for module in modules:
        for target, line in imports(module):
            known = _known(target, names)
            if known is None or known == module.name:
                continue
            graph[module.name].add(known)
            where.setdefault((module.name, known), f"{module.where}:{line}")
    return graph, where


def _known(dotted: str, names: set[str]) -> str | None:
    """`dotted`, or the nearest package above it among `names` (`from P import name` of a non-module)."""
    while dotted and dotted not in names:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def one_cycle(graph: Mapping[str, set[str]], component: list[str]) -> list[str]:
    """A closed path through the component's first module: what to cut, edge by edge."""
    members = set(component)
    start = component[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:  # breadth first, so the path shown is a shortest one
        following = []
        for node in frontier:
            for target in sorted(graph[node] & members):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    return component


def _report(graph: Graph, where: dict[tuple[str, str], str]) -> str:
    lines = []
    for component in circles(graph):
        cycle = one_cycle(graph, component)
        lines.append(f"a circle of {len(component)} modules: {', '.join(component)}")
        lines += [f"    {a} -> {b}  ({where[a, b]})" for a, b in zip(cycle, cycle[1:])]
    return "\n".join(lines)


# --- the checker itself ---


def test_a_circle_closed_by_a_type_hint_or_a_lazy_import_is_found_and_shown():
    modules = [
        parse("orchestrator/errors.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                        "    from orchestrator.engines.base import Diagnosis\n"),
        parse("orchestrator/engines/base.py", "from orchestrator.core import spec\n"),
        parse("orchestrator/core/spec.py", "def f():\n    from orchestrator.errors import SpecError\n"),
        parse("orchestrator/core/names.py", "from orchestrator.errors import SpecError\n"),
    ]
    graph, where = graph_of(modules)
    assert circles(graph) == [["orchestrator.core.spec", "orchestrator.engines.base", "orchestrator.errors"]]
    assert _report(graph, where).splitlines() == [
        "a circle of 3 modules: orchestrator.core.spec, orchestrator.engines.base, orchestrator.errors",
        "    orchestrator.core.spec -> orchestrator.errors  (orchestrator/core/spec.py:2)",
        "    orchestrator.errors -> orchestrator.engines.base  (orchestrator/errors.py:3)",
        "    orchestrator.engines.base -> orchestrator.core.spec  (orchestrator/engines/base.py:1)",
    ]


def test_a_package_re_export_is_an_edge_of_the_package():
    modules = [
        parse("orchestrator/cli/__init__.py", "from . import runs\n"),
        parse("orchestrator/cli/runs.py", "from orchestrator.cli import the_app\n"),
        parse("orchestrator/cli/app.py", "import typer\n"),
        parse("orchestrator/cli/stop.py", "from orchestrator.cli.app import app\n"),
    ]
    graph, _ = graph_of(modules)
    assert circles(graph) == [["orchestrator.cli", "orchestrator.cli.runs"]]


def test_a_graph_without_circles_passes():
    graph = {"a": {"b", "c"}, "b": {"c"}, "c": set()}
    assert circles(graph) == []


# --- the house ---


def _edges_out(graph: Graph, prefix: str) -> dict[str, set[str]]:
    """Each module under `prefix` and its edges to modules outside it."""
    return {name: {t for t in targets if not t.startswith(prefix)} for name, targets in graph.items()
            if name.startswith(prefix) and any(not t.startswith(prefix) for t in targets)}


def test_the_stand_ins_are_a_sink_no_engine_reaches():
    graph, where = graph_of(orch_modules())
    stand_ins = "orchestrator.rehearsal"
    assert stand_ins in graph and not any(name.startswith(f"{stand_ins}.trees") for name in graph)
    assert _edges_out(graph, stand_ins) == {}, "orchestrator/rehearsal/ imports nothing outside itself"
    into = [where[name, target] for name, targets in graph.items() if name.startswith("orchestrator.engines")
            for target in targets if target.startswith(stand_ins)]
    assert not into, f"engine modules that import a stand-in: {into}"


def test_no_import_circle():
    graph, where = graph_of(orch_modules())
    assert not circles(graph), _report(graph, where)
