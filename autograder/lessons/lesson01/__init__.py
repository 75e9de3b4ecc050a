"""Lesson 01: HBM traffic, arithmetic intensity and the roofline.

``checks``: the lesson's graded checks (registered on import).
"""
from . import checks  # noqa: F401  (registers the checks)
