"""Where the grader may make a cgroup (autograder/isolation/cgroup.py), read from a /sys/fs/cgroup it is shown.

The real trees need privileges this suite may lack (tests/test_sandbox_limits.py runs the limits where a group can
be made); here fake trees show each layout's answer: cgroup v1, cgroup v2 with and without the memory and pids
controllers delegated to the grader's group (a desktop's systemd session without ``Delegate=yes``), and none.
"""
from __future__ import annotations

import pytest

from autograder.isolation import cgroup


def tree(tmp_path, monkeypatch, files: dict[str, str], own: dict[str, str]):
    """A fake cgroup root holding ``files`` (path -> text), this process in the groups ``own`` names."""
    for path, text in files.items():
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    monkeypatch.setattr(cgroup, "ROOT", str(tmp_path))
    monkeypatch.setattr(cgroup, "_own", lambda hierarchy: own.get(hierarchy))
    return tmp_path


def test_cgroup_v2_without_delegation_says_how_to_get_it(tmp_path, monkeypatch):
    """The grader's group (a user session's scope) has the controllers but does not hand memory and pids down to
    its children: no group is made, and the reason says what to run instead; the per-process limits still hold."""
    tree(tmp_path, monkeypatch, {"cgroup.controllers": "cpu io memory pids",
                                 "user.slice/session-3.scope/cgroup.procs": "",
                                 "user.slice/session-3.scope/cgroup.subtree_control": ""},
         {"": "/user.slice/session-3.scope"})
    ok, why = cgroup.status()
    assert not ok and "systemd-run --user --scope -p Delegate=yes" in why, why
    assert cgroup.create() is None


def test_cgroup_v2_delegated_gives_one_group_with_both_limits(tmp_path, monkeypatch):
    root = tree(tmp_path, monkeypatch, {"cgroup.controllers": "memory pids",
                                        "grader/cgroup.procs": "", "grader/cgroup.subtree_control": "memory pids"},
                {"": "/grader"})
    assert cgroup.status() == (True, "cgroup v2")
    group = cgroup.create(memory_bytes=1 << 30, processes=64)
    assert group is not None and group.version == 2 and len(group.folders) == 1
    folder = root / "grader" / group.folders[0].rsplit("/", 1)[1]
    assert (folder / "memory.max").read_text() == str(1 << 30) and (folder / "pids.max").read_text() == "64"
    assert cgroup.enter(group, ["true"])[:2] == ["/bin/sh", "-c"] and str(folder / "cgroup.procs") in \
        cgroup.enter(group, ["true"])[2]


def test_cgroup_v1_gives_a_memory_and_a_pids_group(tmp_path, monkeypatch):
    tree(tmp_path, monkeypatch, {"memory/cgroup.procs": "", "pids/cgroup.procs": ""}, {"memory": "/", "pids": "/"})
    assert cgroup.status() == (True, "cgroup v1")
    group = cgroup.create(memory_bytes=1 << 30, processes=64)
    assert group is not None and group.version == 1 and len(group.folders) == 2
    memory, pids = group.folders
    assert open(f"{memory}/memory.limit_in_bytes").read() == str(1 << 30) and open(f"{pids}/pids.max").read() == "64"


@pytest.mark.parametrize("files", [{}, {"cgroup.controllers": "memory pids"}])
def test_no_cgroup_or_an_unreadable_v2_parent_says_why(tmp_path, monkeypatch, files):
    tree(tmp_path, monkeypatch, files, {"": "/gone"})
    ok, why = cgroup.status()
    assert not ok and ("нет cgroup v1" in why or "cgroup.subtree_control" in why), why
    assert cgroup.create() is None
