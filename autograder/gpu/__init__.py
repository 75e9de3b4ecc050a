"""GPU support: compilation without a GPU (``nvrtc``), the run time of GPU checks (``runtime``), compute-sanitizer.

``describe_gpu`` and ``gpu_status`` are here too: the notebooks released before this layout import them
from ``autograder.gpu`` (until the end of the 2026/27 term).
"""
from .runtime import describe_gpu, gpu_status  # noqa: F401
