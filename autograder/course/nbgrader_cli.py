"""nbgrader's own command lines, run in a course folder (several in one process), and scratch courses.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .paths import ROOT, SOLUTIONS, lessons


def nbgrader_env() -> dict[str, str]:
    """The environment for nbgrader: this interpreter's bin first on PATH (for alembic)."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return env


def nbgrader(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in the course folder ``cwd``; raise with its log on failure.  A new process runs
    nbgrader's own command line (:class:`NbGraderApp`, the ``nbgrader`` script's ``main``) through
    :func:`nbgrader_batch`, which imports nbgrader a second faster than the script does (autograder/__init__.py)."""
    return nbgrader_batch([args], cwd=cwd, check=check)


def nbgrader_batch(commands: list[tuple[str, ...]], cwd: Path, check: bool = True,
                   scratch: bool = False) -> subprocess.CompletedProcess:
    """Run several ``nbgrader`` command lines one after another in one Python process
    (:mod:`autograder.nbgrader.batch`): nbgrader's start-up is paid once.  ``scratch``: ``cwd``
    is a throwaway course, whose gradebook need not survive a power cut."""
    command = [sys.executable, "-m", "autograder.nbgrader.batch", *(["--scratch"] if scratch else []),
               json.dumps([list(c) for c in commands])]
    done = subprocess.run(command, cwd=cwd, env=nbgrader_env(), capture_output=True, text=True)
    if check and (done.returncode != 0 or "[ERROR]" in done.stderr):
        names = " && ".join(" ".join(c) for c in commands)
        raise RuntimeError(f"nbgrader {names} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done


def new_course(folder: Path, root: Path = ROOT, only: list[str] | None = None) -> Path:
    """A scratch course in ``folder``: the config and the sources of ``only`` (or all) lessons."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "nbgrader_config.py", folder / "nbgrader_config.py")
    for lesson in only or lessons(root):
        shutil.copytree(root / SOLUTIONS / lesson, folder / SOLUTIONS / lesson,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return folder
