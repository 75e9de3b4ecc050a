"""Is the package's house the one docs/developer.md draws: rooms in layers, no arrow back up, no cycle?

Every ``import`` statement of the ``autograder`` package is read (those inside functions too: an import moved
into a function to dodge a cycle is still a dependency).  A room may import its own modules and the rooms
below it, never one above; no two modules may import each other, directly or around a loop.  The top-level
modules that keep old import paths alive for one term (:data:`OLD_PATHS`) are outside the house.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "autograder"

#: The rooms, lowest first: each may import those before it.
LAYERS = ["checks", "isolation", "gpu", "lessons", "nbgrader", "course"]
#: Top-level modules: where in the house they stand.
TOP_LEVEL = {"__init__": "isolation", "notebook": "isolation"}
#: Shims of old import paths, kept for one term (docs/developer.md says until when and for whom).
OLD_PATHS = {"nbgrader_ext", "grades_csv", "plots", "tracing", "cuda_basics"}
#: Below every room: the guard (a package: its hook, its undo, its state) imports nothing of the package but
#: itself, and the checks' call of student code (checks.core.call_student) runs inside it.
GUARD = "autograder.isolation.guard"


def in_base(module: str) -> bool:
    return module == GUARD or module.startswith(GUARD + ".")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) == 1:
        return TOP_LEVEL["__init__"]
    if parts[1] in LAYERS:
        return parts[1]
    if parts[1] in OLD_PATHS:
        return None
    return TOP_LEVEL.get(parts[1])


def imports_of(path: Path) -> set[str]:
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("autograder")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("autograder"):
                continue
            for alias in node.names:  # ``from . import gpu``: the module autograder.gpu
                candidate = f"{target}.{alias.name}"
                found.add(candidate if known(candidate) else target)
    return found - {module}


def known(module: str) -> bool:
    path = PACKAGE.parent / module.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {m: {i for i in imports_of(p) if i in modules} for m, p in modules.items()
            if room_of(m) is not None}


def test_the_base_module_imports_nothing_of_the_package():
    base = {m: p for m, p in ((module_name(p), p) for p in PACKAGE.rglob("*.py")) if in_base(m)}
    assert len(base) > 1, "the guard's modules not found"
    outside = {m: sorted(i for i in imports_of(p) if not in_base(i)) for m, p in base.items()}
    assert not any(outside.values()), outside


def test_no_room_imports_a_room_above_it():
    arrows = []
    for module, targets in graph().items():
        for target in targets:
            mine, theirs = room_of(module), room_of(target)
            if in_base(target):
                continue
            if theirs is None:
                arrows.append(f"{module} -> {target} (an old path: import the new one)")
            elif LAYERS.index(theirs) > LAYERS.index(mine):
                arrows.append(f"{module} ({mine}) -> {target} ({theirs})")
    assert not arrows, "arrows back up:\n" + "\n".join(sorted(arrows))


def test_no_import_cycle():
    edges = graph()
    cycles, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_every_lesson_is_a_package_found_by_name():
    from autograder.checks.core import lesson_packages

    lessons = lesson_packages()
    assert lessons == sorted(p.name for p in (PACKAGE / "lessons").iterdir()
                             if p.is_dir() and p.name.startswith("lesson") and (p / "__init__.py").exists())
    assert lessons[:2] == ["lesson01", "lesson02"] and "lesson11" in lessons
