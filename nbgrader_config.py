"""The course as nbgrader sees it: sources in solutions/, student notebooks in notebooks/.

Every nbgrader command run from this folder reads this file (run them through `make` or with
.venv/bin on PATH: nbgrader shells out to `alembic`).
"""
import os

from autograder.nbgrader.autograde import use_course_autograde
from autograder.nbgrader.pipeline import autograde_preprocessors, feedback_preprocessors, sanitize_preprocessors

c = get_config()  # noqa: F821 (provided by nbgrader)

# The folder of this file, absolute (a relative "." makes every nbgrader command warn).
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))  # noqa: F821 (set by traitlets)
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"

# Lessons: one nbgrader assignment each, with one notebook of the same name.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback"]

# Student-facing stubs in Russian.
c.ClearSolutions.code_stub = {"python": "# ВАШ КОД ЗДЕСЬ\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "ВАШ ОТВЕТ ЗДЕСЬ"

# Graded test cells are run by the grader, not by the student's kernel (autograder/nbgrader_ext.py).
c.Autograde.autograde_preprocessors = autograde_preprocessors()
# The student's kernel under autograde: an allocation beyond this many GiB is a MemoryError (not
# the OOM killer); a kernel that dies or hangs is restarted and the rest of the notebook graded.
c.IsolatedExecute.kernel_memory_limit_gib = 8
# Every submission is graded in its own OS sandbox (bubblewrap; autograder/sandbox.py): without one this
# machine refuses to grade. "off" grades without it (your own notebooks only); `course autograde --no-sandbox`.
c.IsolatedExecute.sandbox = "required"
# Without a GPU on this machine, the kernels of the GPU lessons (06-09, 11) run on the PTX emulator and its
# verdicts count; False: every check that runs a kernel gets 0 points with «нужен GPU». Timed checks always
# need a GPU (0 points on the emulator, and they say so).
c.IsolatedExecute.gpu_emulator = True
# Ordinary cells: a cell still running after 120 s is interrupted and the rest is graded.
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True
# When the last cell has run (all its outputs are in), the kernel is stopped at once: a graceful
# shutdown waits for the student's threads and atexit hooks, seconds that grade nothing.
c.Execute.shutdown_kernel = "immediate"

# The submission's graded cells are made the gradebook's before grading (deleted test cells
# restored, copies and unknown grade ids ignored), and `nbgrader autograde` regrades a
# submission whose grading was cut short instead of skipping it (autograder/nbgrader_ext.py).
c.Autograde.sanitize_preprocessors = sanitize_preprocessors()
use_course_autograde()

# `nbgrader collect` copies submissions from the exchange without following links (a link to the gradebook
# in a student's inbound folder would be copied as its contents: autograder/nbgrader/collect.py).
c.ExchangeFactory.collect = "autograder.nbgrader.collect.CollectWithoutLinks"

# Late work (submitted after the assignment's due date): nbgrader marks it late; the penalty is the course's
# (autograder/course/late_penalty.py): percent_per_day of the score per started day, after grace_minutes.
# 0 (as here): late work is flagged in the gradebook, grades.csv and the report, and loses nothing.
c.AssignLatePenalties.plugin_class = "autograder.course.late_penalty.LatePenalty"
c.LatePenalty.percent_per_day = 0
c.LatePenalty.grace_minutes = 0

# `nbgrader export`: a status column (не сдана / сдана, не проверена / проверена) and no 0.0 for
# work that could not be graded (autograder/grades_csv.py).
c.ExportApp.plugin_class = "autograder.course.export_csv.CourseCsvExport"

# `nbgrader generate_feedback`: hidden tests and their cases stay hidden; each check shown once;
# long lines wrap (autograder/feedback_style.py).
c.GenerateFeedback.preprocessors = feedback_preprocessors()
