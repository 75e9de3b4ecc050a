"""Lesson 03: fused SwiGLU — checks of ``fused_swiglu`` and of the byte count per token.

``checks``: the lesson's graded checks (registered on import).
"""
from . import checks  # noqa: F401  (registers the checks)
