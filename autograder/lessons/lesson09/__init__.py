"""Lesson 09: matrix products and FlashAttention on tensor cores (``mma.sync``) through ``cupy.RawKernel``.

``checks``: the lesson's graded checks (registered on import).
"""
from . import checks  # noqa: F401  (registers the checks)
