"""Lesson 11: decode attention — flash-decoding over a paged KV cache with GQA.

``checks``: the lesson's graded checks (registered on import).
"""
from . import checks  # noqa: F401  (registers the checks)
