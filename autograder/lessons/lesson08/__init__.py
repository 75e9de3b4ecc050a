"""Lesson 08: FlashAttention forward as a CUDA kernel launched through ``cupy.RawKernel``.

``checks``: the lesson's graded checks (registered on import).
"""
from . import checks  # noqa: F401  (registers the checks)
