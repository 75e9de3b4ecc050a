"""Old import path (until the end of the 2026/27 term): lesson 06 notebooks released before import it; the module is now :mod:`autograder.lessons.lesson06.cuda_basics`."""
from autograder.lessons.lesson06.cuda_basics import *  # noqa: F401,F403
from autograder.lessons.lesson06.cuda_basics import describe_gpu  # noqa: F401
