"""Do environment.yml and pyproject.toml pin the same packages at the same versions?"""
import re
import tomllib

import pytest
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


@pytest.mark.xdist_group("grouping_probe")
def test_xdist_groups_are_honoured(request):
    """Under ``--dist loadgroup`` is this test's group in its node id (so its group runs on one worker)?

    pytest 9.2.0 with pytest-xdist 3.8.0 drops the groups silently (pytest-dev/pytest-xdist#1386): the
    class-grading fixtures were then built on both workers at once, and tests that share one ran apart.
    """
    argv = " ".join(getattr(request.config, "workerinput", {}).get("mainargv", []))
    if not re.search(r"--dist[= ]loadgroup", argv):
        pytest.skip("не под pytest-xdist с --dist loadgroup")
    assert request.node.nodeid.endswith("@grouping_probe"), request.node.nodeid
