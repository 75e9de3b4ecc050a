"""Lesson 05: FlashAttention — checks of ``flash_attention`` and ``flash_attention_v2``.

``checks``: the lesson's graded checks (registered on import).

``tracing``: arrays that remember their Q and K rows, so the grader observes the tile products.
"""
from . import checks  # noqa: F401  (registers the checks)
