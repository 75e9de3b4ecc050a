"""Lesson 02: fused RMSNorm — checks of ``fused_rms_norm`` and the bonus ``fused_add_rms_norm``.

``checks``: the lesson's graded checks (registered on import).
"""
from . import checks  # noqa: F401  (registers the checks)
