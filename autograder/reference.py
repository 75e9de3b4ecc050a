"""Float64 oracles: the plain formulas, computed in float64, that every check compares against.

They materialise every intermediate on purpose: clarity over memory.  Inputs are converted to
float64 first, so the oracle's own rounding is far below any float32 tolerance.
"""
from __future__ import annotations

import numpy as np


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def rms_norm(x, w, eps: float = 1e-6) -> np.ndarray:
    """y = x / sqrt(mean(x^2 over the last axis) + eps) * w."""
    x, w = _f64(x), _f64(w)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def add_rms_norm(x, residual, w, eps: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """(rms_norm(x + residual), x + residual): the pre-norm block's residual add fused in."""
    h = _f64(x) + _f64(residual)
    return rms_norm(h, w, eps), h


def silu(x) -> np.ndarray:
    """x * sigmoid(x), written so that large |x| neither overflows nor gives NaN."""
    x = _f64(x)
    z = np.exp(-np.abs(x))
    return np.where(x >= 0, x / (1.0 + z), x * z / (1.0 + z))


def swiglu(x, w_gate, w_up) -> np.ndarray:
    """silu(x @ W_gate) * (x @ W_up)."""
    x = _f64(x)
    return silu(x @ _f64(w_gate)) * (x @ _f64(w_up))


def softmax(s, axis: int = -1) -> np.ndarray:
    """Softmax with the max subtracted; rows that are entirely -inf give 0, not NaN."""
    s = _f64(s)
    m = np.max(s, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    total = np.sum(e, axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def causal_mask(n_q: int, n_k: int) -> np.ndarray:
    """True where query i may attend to key j (j <= i), aligned at the top-left corner."""
    return np.arange(n_k)[None, :] <= np.arange(n_q)[:, None]


def attention(q, k, v, causal: bool = False) -> np.ndarray:
    """softmax(Q K^T / sqrt(d)) V for (n, d) inputs, in float64."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    s = q @ k.T / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(causal_mask(*s.shape), s, -np.inf)
    return softmax(s) @ v
