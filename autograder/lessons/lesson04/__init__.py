"""Lesson 04: online softmax — checks of the (m, l, acc) state and its four functions.

``checks``: the lesson's graded checks (registered on import).
"""
from . import checks  # noqa: F401  (registers the checks)
