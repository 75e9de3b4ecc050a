"""The lessons' checks: one module (or a package, like lesson 10) per lesson, registered here.

A check id is ``lessonNN.name``; :func:`autograder.core.get_check` imports the module that
:data:`MODULES` gives for ``lessonNN`` on first use, and the module's ``@check`` decorators
register its checks.  Adding a lesson: write its module here, add one line below.
Helpers several lessons use live outside this package (``autograder.reference``,
``autograder.scalars``, ``autograder.mistakes``, ``autograder.gpu``...), never in a lesson.
"""
from __future__ import annotations

MODULES = {
    "lesson01": "autograder.lessons.lesson01_hbm_intensity",
    "lesson02": "autograder.lessons.lesson02_fused_rmsnorm",
    "lesson03": "autograder.lessons.lesson03_swiglu",
    "lesson04": "autograder.lessons.lesson04_online_softmax",
    "lesson05": "autograder.lessons.lesson05_flash_attention",
    "lesson06": "autograder.lessons.lesson06_cuda_basics",
    "lesson07": "autograder.lessons.lesson07_cupy_rmsnorm",
    "lesson08": "autograder.lessons.lesson08_cupy_flash_attention",
    "lesson09": "autograder.lessons.lesson09_tensor_cores",
    "lesson10": "autograder.lessons.lesson10",
    "lesson11": "autograder.lessons.lesson11_flash_decoding",
}
