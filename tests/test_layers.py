"""The package's import graph: no circle, and no import from a lower layer into a higher one (docs/architecture.md).

Every `import` and `from ... import` of trackmania_rl modules is read with `ast`, those inside functions (imported
when first used) and under `if TYPE_CHECKING:` included. Layers, top to bottom: evaluation and benchmarks, learner_group,
learner, replay, rollouts, agents, games; the ground (config, monitoring, device.py, serialization.py,
deferred_signals.py) is used by all and uses none of them. The scripts sit above everything and are not checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "trackmania_rl"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / PACKAGE
# rank of each top-level part of the package: a module may import its own rank or lower ones
LAYERS = {
    "evaluation": 7,
    "benchmarks": 7,
    "learner_group": 6,
    "learner": 5,
    "replay": 4,
    "rollouts": 3,
    "agents": 2,
    "games": 1,
    "config": 0,
    "monitoring": 0,
    "device": 0,
    "serialization": 0,
    "deferred_signals": 0,
}


def module_name(path: Path, package_dir: Path = PACKAGE_DIR) -> str:
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules(package_dir: Path = PACKAGE_DIR) -> dict[str, Path]:
    return {module_name(path, package_dir): path for path in sorted(package_dir.rglob("*.py"))}


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that module `name` imports anywhere in its file. `from P import x` names module P.x
    when it is one, else P; importing a submodule is not counted as importing its parent packages (Python runs their
    __init__ first, but that is the package's own business, not a dependency of the importer)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's own package upward
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                if node.module:
                    base += node.module.split(".")
                source = ".".join(base)
            else:
                source = node.module or ""
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target == PACKAGE or target.startswith(PACKAGE + "."))
    found.discard(name)
    return found


def import_graph(package_dir: Path = PACKAGE_DIR) -> dict[str, set[str]]:
    modules = all_modules(package_dir)
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            here, there = layer_of(module), layer_of(target)
            if here is not None and there is not None and there > here:
                problems.append(f"{module} (layer {here}) imports {target} (layer {there})")
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of more than one module (Tarjan's algorithm), as a sorted list."""
    index, low, on_stack, stack, groups = {}, {}, set(), [], []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def test_every_part_of_the_package_has_a_layer():
    parts = {module.split(".")[1] for module in all_modules() if module != PACKAGE}
    assert parts == set(LAYERS), "a new part of the package: give it a layer here and in docs/architecture.md"


def test_the_package_has_no_import_circle():
    assert cycles(import_graph()) == []


def test_no_module_imports_from_a_higher_layer():
    assert upward_imports(import_graph()) == []


def test_the_checks_see_circles_upward_and_function_level_imports(tmp_path):
    """The checks themselves, on a small package built here: a circle made by an import inside a function, an
    upward import through a relative import, and a harmless import of a sibling's package."""
    package = tmp_path / PACKAGE
    for folder in ("games", "learner", "games/car_racing"):
        (package / folder).mkdir(parents=True, exist_ok=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "games" / "backend.py").write_text("def find():\n    from trackmania_rl.games.car_racing import backend\n")
    (package / "games" / "car_racing" / "backend.py").write_text("from trackmania_rl.games.backend import find\n")
    (package / "games" / "zones.py").write_text("from ..learner import held_out\nfrom . import backend\n")
    (package / "learner" / "held_out.py").write_text("import trackmania_rl.games\n")
    graph = import_graph(package)
    assert graph[f"{PACKAGE}.games.zones"] == {f"{PACKAGE}.learner.held_out", f"{PACKAGE}.games.backend"}
    assert cycles(graph) == [[f"{PACKAGE}.games.backend", f"{PACKAGE}.games.car_racing.backend"]]
    assert upward_imports(graph) == [f"{PACKAGE}.games.zones (layer 1) imports {PACKAGE}.learner.held_out (layer 5)"]


if __name__ == "__main__":  # a report of today's graph: python tests/test_layers.py
    graph = import_graph()
    for group in cycles(graph):
        print("circle:", " <-> ".join(group))
    for problem in upward_imports(graph):
        print("upward:", problem)
