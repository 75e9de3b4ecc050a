"""Seeded input builders: every case is reproducible from its parameters."""
from __future__ import annotations

import numpy as np


def normal(shape, seed: int, scale: float = 1.0, dtype=np.float32) -> np.ndarray:
    """N(0, scale^2) samples of ``shape`` from PCG64(seed), as ``dtype``."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype(dtype)


def uniform(shape, seed: int, low: float, high: float, dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(low, high, size=shape).astype(dtype)
