"""Module 07 workbook: lesson checks, their isolation, and the nbgrader pipeline.

Test cells call :func:`grade`; everything else lives in its room, a subpackage per layer: ``checks``
(registry, results, mistakes, oracles), ``isolation`` (workers, guard, sandbox), ``gpu``, ``lessons``
(one ``lessonNN`` package per lesson), ``nbgrader`` (the plugins) and ``course`` (the ``course`` command).
docs/developer.md draws the house.
"""


def grade(check_id: str, *objects, cases=None):
    """Run a registered check on the student's objects (see :mod:`autograder.notebook`)."""
    __tracebackhide__ = True
    from .notebook import grade as _grade

    return _grade(check_id, *objects, cases=cases)
