"""The house rules, checked on the source: no import cycle (imports inside functions count),
no import inside a function in an algorithm's package, no module over 350 lines, and shared
modules that name no algorithm."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from impala.config import shared_fields
from impala.registry import builtin_algorithms
from tests.helpers import ROOT

PACKAGE = ROOT / "impala"
MAX_LINES = 350
ALGORITHMS = "impala.algorithms"  # each algorithm's package, with all of its math


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def runtime_nodes(tree: ast.AST):
    """Every node but those under `if TYPE_CHECKING:` (annotations: never executed)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            continue
        yield node
        yield from runtime_nodes(node)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every project module `path` imports when it runs, at the top or inside a function:
    `from a import b` counts as a.b where that is a module, else as a."""
    found = set()
    for node in runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in known else node.module)
    return {name for name in found if name in known}


def test_no_module_imports_itself_back_even_lazily():
    known = set(modules())
    graph = {name: imports_of(path, known) - {name} for name, path in modules().items()}
    cycles = []

    def visit(name: str, stack: list[str], done: set[str]) -> None:
        for target in sorted(graph[name]):
            if target in stack:
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in done:
                visit(target, [*stack, target], done)
        done.add(name)

    done: set[str] = set()
    for name in sorted(graph):
        if name not in done:
            visit(name, [name], done)
    assert cycles == []


def test_no_algorithm_imports_inside_a_function():
    """An algorithm's declaration is torch-free and its behaviour module imports what it
    needs at its top (impala/algorithm.py): nothing is imported late to dodge a cycle."""
    late = []
    for name, path in modules().items():
        if not name.startswith(ALGORITHMS):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                late += [f"{name}.{node.name}" for inner in ast.walk(node)
                         if isinstance(inner, ast.Import | ast.ImportFrom)]
    assert late == []


def test_every_module_is_at_most_350_lines():
    long = {name: n for name, path in modules().items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_shared_modules_name_no_algorithm_nor_its_columns():
    """Outside an algorithm's own modules, no built-in algorithm's name (as a word, in code,
    strings or comments), and none of its heads, recorded field, log scalars or panels'
    columns as a string: the shared code loops over what an algorithm declares."""
    algorithms = builtin_algorithms()
    words = {"apex", "ape-x", "r2d2"} | {name for name in algorithms if name != "impala"}
    declared = set()
    for cls in algorithms.values():
        declared |= {head.name for head in cls.heads} | {cls.recorded, *cls.log_scalars}
        declared |= set(cls.episode_tags)
        declared |= {column for panel in cls.panels for column in panel.columns}
    declared -= {"total_loss", "replay_fill", "replay_age"}  # shared columns, panelled
    declared -= {field.name for field in shared_fields()}  # e.g. RMSProp's `epsilon` flag
    problems = []
    for name, path in modules().items():
        if name.startswith(ALGORITHMS):
            continue
        source = path.read_text()
        for word in words:
            if re.search(rf"\b{re.escape(word)}\b", source, re.IGNORECASE):
                problems.append(f"{name}: {word}")
        # The frontend's tmux session keeps the original project's name, `impala`.
        names = declared | ({"impala"} if name != "impala.launcher.options" else set())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Constant) and node.value in names:
                problems.append(f"{name}: {node.value!r}")
    assert problems == []


def test_no_test_module_imports_another():
    """Shared test code lives in tests/*.py helpers: a test module that imports another
    one runs (and breaks with) tests it does not own."""
    found = []
    for path in sorted((ROOT / "tests").glob("*/test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and re.match(
                    r"tests\.(unit|integration|e2e)\.test_", node.module):
                found.append(f"{path.relative_to(ROOT)}: {node.module}")
    assert found == []
