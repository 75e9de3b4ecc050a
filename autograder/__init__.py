"""Module 07 workbook: lesson checks, their isolation, and the nbgrader pipeline.

Test cells call :func:`grade`; everything else lives in submodules (``core``, ``isolation``,
``reference``, ``mistakes``, ``memory``, one ``lessonNN_*`` module per lesson, ``cli``).
"""


def grade(check_id: str, *objects, cases=None):
    """Run a registered check on the student's objects (see :mod:`autograder.notebook`)."""
    __tracebackhide__ = True
    from .notebook import grade as _grade

    return _grade(check_id, *objects, cases=cases)
