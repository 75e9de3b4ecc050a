"""Lesson 09: matrix products and FlashAttention on tensor cores (``mma.sync``) through ``cupy.RawKernel``.

``checks``: the lesson's graded checks (registered on import).

``cuda_notes``: the lesson's notes on the given C++ and PTX (ungraded: NumPy models, the cp.async picture).
"""
from . import checks  # noqa: F401  (registers the checks)
