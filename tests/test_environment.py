"""Do environment.yml and pyproject.toml pin the same packages at the same versions?"""
import re
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

