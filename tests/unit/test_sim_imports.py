"""No import cycle among sglang_sim's modules, counting every import a file makes: at module level,
inside functions and under `if TYPE_CHECKING:`."""

from __future__ import annotations

import ast
from pathlib import Path

SIM = Path(__file__).resolve().parents[2] / "sglang_sim"
PACKAGE = "sglang_sim"


def _module(name: str) -> str | None:
    """The sglang_sim module a dotted name within the package refers to (None: not one)."""
    head = name.split(".")[0]
    return head if (SIM / f"{head}.py").is_file() else None


def import_graph() -> dict[str, set[str]]:
    """Module name (`__init__` for the package) -> the sglang_sim modules it imports."""
    graph: dict[str, set[str]] = {}
    for path in sorted(SIM.glob("*.py")):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                        deps.add(_module(alias.name[len(PACKAGE) + 1 :]) or "__init__")
            elif isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    base = node.module or ""
                elif node.level == 0 and node.module and node.module.split(".")[0] == PACKAGE:
                    base = node.module[len(PACKAGE) + 1 :]
                else:
                    continue  # the standard library, sglang_layouts, or the like
                if base:
                    deps.add(_module(base) or "__init__")
                else:  # `from . import x`: the submodule x, or a name the package defines
                    deps.update(_module(alias.name) or "__init__" for alias in node.names)
        deps.discard(path.stem)
        graph[path.stem] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that starts and ends at the same module, or None."""
    state: dict[str, int] = {}  # 1: on the DFS stack, 2: done
    stack: list[str] = []

    def visit(mod: str) -> list[str] | None:
        state[mod] = 1
        stack.append(mod)
        for dep in sorted(graph.get(mod, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        stack.pop()
        state[mod] = 2
        return None

    for mod in sorted(graph):
        if mod not in state and (cycle := visit(mod)):
            return cycle
    return None


def test_graph_sees_the_simulators_imports():
    graph = import_graph()
    assert {"http_conn", "multinode", "routes", "startup"} <= graph["server"]
    assert "http_conn" in graph["startup"]
    assert "http_conn" in graph["routes"]  # a TYPE_CHECKING import counts
    assert "failures" in graph["engine"]  # so does one inside a function


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_among_sglang_sim_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
