"""Do environment.yml and pyproject.toml pin the same packages at the same versions?"""
import re
import subprocess
import sys
import tomllib

import yaml

from autograder.course.paths import ROOT


def pins(requirements):
    found = {}
    for line in requirements:
        match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)==([^\s;]+)\s*", line)
        assert match, f"not an exact pin: {line!r}"
        found[match.group(1).lower().replace("_", "-")] = match.group(2)
    return found


def test_environment_yml_and_pyproject_agree():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    from_pyproject = pins(project["dependencies"] + project["optional-dependencies"]["dev"])
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    from_environment = pins([r for r in pip_section if not r.startswith("-e")])
    assert from_environment == from_pyproject
    python = next(d for d in environment["dependencies"] if isinstance(d, str) and d.startswith("python="))
    assert python == "python=3.11"



def test_importing_nbformat_builds_no_grammar_parser():
    """A process that imports nbformat before the autograder package (JupyterLab's server, JupyterHub, the nbgrader
    command) imports jsonschema's format checkers: from 4.24 on they import rfc3987-syntax, whose Lark parser costs
    1.5 CPU-s per process (pyproject.toml pins 4.23; autograder/__init__.py covers the grader's own processes)."""
    done = subprocess.run([sys.executable, "-c", "import sys, nbformat; print('rfc3987_syntax' in sys.modules)"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False", "nbformat imported rfc3987_syntax: see jsonschema's pin in pyproject.toml"
