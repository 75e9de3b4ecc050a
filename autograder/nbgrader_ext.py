"""Old import path (until the end of the 2026/27 term): instructors' nbgrader_config.py files import the
pipeline from here.  The steps are now in :mod:`autograder.nbgrader` (``pipeline``, ``execute``, ``autograde``)."""
from autograder.nbgrader.autograde import CourseAutograde, use_course_autograde  # noqa: F401
from autograder.nbgrader.execute import IsolatedExecute  # noqa: F401
from autograder.nbgrader.pipeline import (autograde_preprocessors, feedback_preprocessors,  # noqa: F401
                                          sanitize_preprocessors)
