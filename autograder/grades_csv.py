"""Old import path (until the end of the 2026/27 term): instructors' configs name `autograder.grades_csv.CourseCsvExport`; the module is now :mod:`autograder.course.export_csv`."""
from autograder.course.export_csv import *  # noqa: F401,F403
from autograder.course.export_csv import CourseCsvExport  # noqa: F401
