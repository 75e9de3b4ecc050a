"""Old import path (until the end of the 2026/27 term): instructors' nbgrader_config.py files import the pipeline from here; the module is now :mod:`autograder.nbgrader.ext`."""
from autograder.nbgrader.ext import *  # noqa: F401,F403
from autograder.nbgrader.ext import autograde_preprocessors, feedback_preprocessors, sanitize_preprocessors, use_course_autograde, IsolatedExecute  # noqa: F401
