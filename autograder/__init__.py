"""Module 07 workbook: lesson checks, their isolation, and the nbgrader pipeline.

Test cells call :func:`grade`; everything else lives in its room, a subpackage per layer: ``checks``
(registry, results, mistakes, oracles), ``isolation`` (workers, guard, sandbox), ``gpu``, ``lessons``
(one ``lessonNN`` package per lesson), ``nbgrader`` (the plugins) and ``course`` (the ``course`` command).
docs/developer.md draws the house.
"""
import sys

# nbformat imports jsonschema, which imports rfc3987_syntax when it is installed (jupyter-events brings it) and so
# builds an IRI grammar: over a second of every process that reads a notebook (each nbgrader command, each worker of
# `course autograde`, each test worker), the jsonschema issue python-jsonschema/jsonschema#1428.  Nothing here
# validates the "iri" formats it checks (nbformat and nbgrader use no format checker), so it is not imported: a
# None in sys.modules makes ``import rfc3987_syntax`` fail, and jsonschema then leaves those two formats out.
# Every process of the grader imports this package before nbformat (``python -m autograder...``, the pickled
# functions of spawned workers, tests/conftest.py).  For the others (JupyterLab, JupyterHub, the ``nbgrader``
# command) pyproject.toml pins jsonschema below the version that imports it; where the package is installed
# without its pins (Colab: --no-deps), this line is what keeps it out, of the grader's processes only.
sys.modules.setdefault("rfc3987_syntax", None)


def grade(check_id: str, *objects, cases=None):
    """Run a registered check on the student's objects (see :mod:`autograder.notebook`)."""
    __tracebackhide__ = True
    from .notebook import grade as _grade

    return _grade(check_id, *objects, cases=cases)
