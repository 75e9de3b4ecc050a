"""Old import path (until the end of the 2026/27 term): notebooks of lessons 02, 03 and 05 released before import it; the module is now :mod:`autograder.lessons.plots`."""
from autograder.lessons.plots import *  # noqa: F401,F403
from autograder.lessons.plots import measure_peaks, plot_peaks, MiB  # noqa: F401
