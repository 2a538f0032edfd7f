"""No module of services/ imports itself back through module-level imports."""

from __future__ import annotations

import ast
from pathlib import Path

SERVICES = Path(__file__).resolve().parents[2] / "services"


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in SERVICES.rglob("*.py"):
        name = ".".join(path.relative_to(SERVICES.parent).with_suffix("").parts).removesuffix(".__init__")
        deps: set[str] = set()
        for node in ast.parse(path.read_text()).body:  # module level only: deferred imports break cycles
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("services"):
                deps |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("services")}
        graph[name] = deps
    return {name: deps & graph.keys() for name, deps in graph.items()}


def test_services_have_no_import_cycles() -> None:
    graph, state, path, cycles = _graph(), {}, [], []

    def visit(module: str) -> None:
        state[module] = "open"
        path.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == "open":
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        path.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert cycles == []
