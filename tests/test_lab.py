"""The course lab's contents manager (autograder/course/lab.py): a Python notebook is served with the language_info
its kernel will report, so opening an untouched lesson marks nothing as modified (the real lab: tests/test_browser.py)."""
import json
import sys

import nbformat

from autograder.course import lab
from autograder.course import paths as course


def test_a_released_notebook_is_described_as_this_pythons_kernel_and_nothing_else_changes():
    notebook = nbformat.read(course.student_notebook("02_fused_rmsnorm"), as_version=4)
    before = json.loads(json.dumps(notebook))
    lab.describe_as_kernel(notebook)
    info = notebook.metadata["language_info"]
    assert info["name"] == "python" and info["version"] == sys.version.split()[0]
    assert info == lab.kernel_language_info()
    del before["metadata"]["language_info"], notebook.metadata["language_info"]
    assert json.loads(json.dumps(notebook)) == before


def test_a_notebook_of_another_kernel_is_left_as_it_is():
    notebook = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "julia-1.10", "display_name": "Julia 1.10"},
                                                  "language_info": {"name": "julia"}})
    lab.describe_as_kernel(notebook)
    assert notebook.metadata["language_info"] == {"name": "julia"}


def test_the_course_lab_uses_it():
    config = json.loads((course.ROOT / ".jupyter" / "jupyter_server_config.json").read_text(encoding="utf-8"))
    assert config["ServerApp"]["contents_manager_class"] == "autograder.course.lab.CourseContentsManager"
