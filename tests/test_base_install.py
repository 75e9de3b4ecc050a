"""Does `pip install .` without extras give a working `course` command?

A fresh virtual environment gets the package the way an instructor installs it (no extras; pip
takes wheels from its cache or PyPI as it normally does), then `course --help` runs and a class
of one submission of lesson 02 (the reference answer) is graded with `course autograde`.  What
the command imports at run time must come with the base dependencies (tqdm once came only with
the dev extra), and the test below it checks every import of the package the same way, statically.
"""
from __future__ import annotations

import ast
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from nbgrader.api import Gradebook
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from autograder.course import paths as course

from autograder.course import grading, nbgrader_cli
from helpers import full_only

LESSON = "02_fused_rmsnorm"
PACKAGE = course.ROOT / "autograder"
#: Imported only where a GPU is, from the ``gpu`` extra.
GPU_EXTRA_MODULES = {"cupy"}


def base_install(venv: Path) -> Path:
    """A fresh venv in ``venv`` with the package from a copy of the project (no build files in
    the checkout) installed without extras; returns its bin folder."""
    project = venv.parent / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(course.ROOT / name, project / name)
    shutil.copytree(PACKAGE, project / "autograder", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    bin_dir = venv / "bin"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(project)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return bin_dir


@full_only("a plain `pip install .` into a fresh venv and a class graded with its `course` (three minutes of CI)",
           "test_every_package_the_grader_imports_comes_with_the_base_dependencies, the same guard read statically")
def test_the_course_command_works_after_a_plain_pip_install(tmp_path):
    bin_dir = base_install(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = str(bin_dir) + os.pathsep + env.get("PATH", "")  # nbgrader shells out to alembic
    installed = subprocess.run([str(bin_dir / "python"), "-c", "import autograder; print(autograder.__file__)"],
                               cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert installed.stdout.startswith(str(tmp_path / "venv")), installed.stdout  # not this checkout's package

    done = subprocess.run([str(bin_dir / "course"), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "autograde" in done.stdout, done.stderr

    # A class of one: the lesson's source, its release (gradebook), one submission with the reference answers.
    class_dir = nbgrader_cli.new_course(tmp_path / "class", only=[LESSON])
    generated = subprocess.run([str(bin_dir / "nbgrader"), "generate_assignment", LESSON, "--force"],
                               cwd=class_dir, env=env, capture_output=True, text=True, timeout=300)
    assert generated.returncode == 0, generated.stderr[-3000:]
    answer = grading.fill_answers(LESSON, grading.reference_answers(LESSON))
    grading.write_submissions(class_dir, LESSON, {"alice": answer})
    graded = subprocess.run([str(bin_dir / "course"), "autograde", LESSON, "--workers", "1"],
                            cwd=class_dir, env=env, capture_output=True, text=True, timeout=600)
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
    with Gradebook(f"sqlite:///{class_dir / 'gradebook.db'}") as gradebook:
        submission = gradebook.find_submission(LESSON, "alice")
        assert submission.max_score > 0 and submission.score >= submission.max_score  # the bonus is extra


# --- the same question without installing anything ---------------------------------------------

def imported_modules() -> dict[str, str]:
    """Top-level modules that autograder/*.py import at module level or in a function, except in a
    ``try`` (optional: CuPy, torch, older cuda-python): module -> the first file importing it."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        optional = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try) for b in t.body for n in ast.walk(b)}
        for node in ast.walk(tree):
            if id(node) in optional:
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], path.name)
    return found


def base_closure() -> set[str]:
    """The distributions that the base dependencies bring, transitively (extras left out)."""
    project = tomllib.loads((course.ROOT / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in project["dependencies"]]
    seen: set[str] = set()
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        try:
            todo += [Requirement(r) for r in importlib.metadata.requires(requirement.name) or []]
        except importlib.metadata.PackageNotFoundError:
            pass  # a platform-specific dependency absent here
    return seen


def test_every_package_the_grader_imports_comes_with_the_base_dependencies():
    """Is every third-party module that autograder/ imports outside a ``try`` provided by a base
    dependency or one of theirs (a dev-only package would break `pip install .`)?"""
    providers = importlib.metadata.packages_distributions()
    closure = base_closure()
    missing = {}
    for module, where in imported_modules().items():
        if module in sys.stdlib_module_names or module in {"autograder", "__future__", *GPU_EXTRA_MODULES}:
            continue
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        if not dists & closure:
            missing[module] = (where, sorted(dists))
    assert not missing, f"imported, but not installed by the base dependencies: {missing}"

