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


# --- known wrong RMSNorm variants ----------------------------------------------------------

def _eps_outside_root(x, w, eps=1e-6):
    x = x.astype(np.float64)
    return x / (np.sqrt(np.mean(x * x, axis=-1, keepdims=True)) + eps) * w


def _mean_over_tokens(x, w, eps=1e-6):
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=0, keepdims=True) + eps) * w


def _sum_not_mean(x, w, eps=1e-6):
    x = x.astype(np.float64)
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps) * w


def _no_sqrt(x, w, eps=1e-6):
    x = x.astype(np.float64)
    return x / (np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _layer_norm(x, w, eps=1e-6):
    x = x.astype(np.float64)
    centred = x - x.mean(axis=-1, keepdims=True)
    return centred / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + eps) * w


def _no_weight(x, w, eps=1e-6):
    return rms_norm(x, np.ones_like(w), eps)


def _eps_ignored(x, w, eps=1e-6):
    return rms_norm(x, w, 1e-6)


def _multiplied_by_rms(x, w, eps=1e-6):
    x = x.astype(np.float64)
    return x * np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


#: Known wrong RMSNorm variants (autograder.checks.mistakes): named by the NumPy lesson (02) and the CUDA one (07).
RMS_NORM_MISTAKES = {
    "eps прибавлен вне корня: x / (sqrt(mean(x²)) + eps)": _eps_outside_root,
    "среднее по оси токенов T (axis=0), а не по D": _mean_over_tokens,
    "сумма квадратов вместо среднего (не поделили на D)": _sum_not_mean,
    "нет квадратного корня: деление на mean(x²) + eps": _no_sqrt,
    "вычитается среднее (это LayerNorm, а не RMSNorm)": _layer_norm,
    "забыли умножить на вес w": _no_weight,
    "параметр eps игнорируется (зашит 1e-6)": _eps_ignored,
    "умножение на RMS вместо деления": _multiplied_by_rms,
}


# --- a Python float passed to a CUDA kernel's float parameter (lessons 07 and 08) ----------------

def python_float_as_float_parameter(value: float) -> np.float32:
    """What a kernel's ``float`` parameter holds when ``cupy.RawKernel`` is given the Python float ``value``: CuPy
    passes a double (8 bytes) and the driver reads the parameter's 4 bytes from its start, the double's low word
    (as autograder.gpu.emulated_cupy.marshalled does without a GPU): -3.1e-19 for 1e-6, 0.0 for 0.125."""
    return np.array([value], dtype=np.float64).view(np.float32)[0]


def _eps_as_python_float(x, w, eps=1e-6):
    return rms_norm(x, w, python_float_as_float_parameter(eps))


PYTHON_FLOAT_ADVICE = ("CuPy передаёт число Python (float) в ядро как double (8 байт), а параметр float читает из "
                       "него 4 младших байта — мусор; оберните его: np.float32(...)")

#: Lesson 07's known wrong variants: lesson 02's and the kernel's own.
GPU_RMS_NORM_MISTAKES = {**RMS_NORM_MISTAKES,
                         f"eps передан в ядро как число Python: {PYTHON_FLOAT_ADVICE}": _eps_as_python_float}


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


def swiglu_traffic(I, bytes_per_element=2):
    """(naive, fused) bytes per token of the intermediates: write g, u, read g, u, write h vs write h."""
    return 5 * I * bytes_per_element, I * bytes_per_element
