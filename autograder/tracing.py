"""Old import path (until the end of the 2026/27 term): lesson 05 and 08 notebooks released before import it; the module is now :mod:`autograder.lessons.lesson05.tracing`."""
from autograder.lessons.lesson05.tracing import *  # noqa: F401,F403
from autograder.lessons.lesson05.tracing import Tracer, Traced, trace, observe_tiles, plot_tiles, expected_tiles  # noqa: F401
