"""Lesson 06: CUDA basics through CuPy - three small kernels, each with its own checks.

``checks``: the lesson's graded checks (registered on import).

``cuda_basics``: the lesson's demonstrations (device facts, launch latency, ownership pictures).
"""
from . import checks  # noqa: F401  (registers the checks)
