"""Correct rounding on NumPy arrays: exact float64 intermediates, round-to-odd, directed rounding modes.

* The product of two float32 is exact in float64; a sum's exact residual comes from TwoSum.  Rounding the
  float64 value to odd (its last bit set when the residual is not zero) and then to float32 rounds the exact
  value correctly in every mode (float64 has more than two bits beyond float32's 24).
* Directed modes (rz, rm, rp) are RN plus a one-ulp correction where RN went the wrong way.
"""
from __future__ import annotations

import numpy as np

F32_CANON_NAN = np.array(0x7FFFFFFF, dtype=np.uint32).view(np.float32)[()]
F64_CANON_NAN = np.array(0xFFF8000000000000, dtype=np.uint64).view(np.float64)[()]
F32_MIN_NORMAL = np.float32(np.finfo(np.float32).tiny)
F64_MIN_NORMAL = np.float64(np.finfo(np.float64).tiny)


def two_sum(a, b):
    """s, e with s = fl(a + b) and a + b = s + e exactly (float64, no overflow)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


_SPLIT = np.float64(134217729.0)  # 2**27 + 1


def two_prod(a, b):
    """p, e with p = fl(a * b) and a * b = p + e exactly (float64, Veltkamp splitting; no over/underflow)."""
    p = a * b
    ca = _SPLIT * a
    ah = ca - (ca - a)
    al = a - ah
    cb = _SPLIT * b
    bh = cb - (cb - b)
    bl = b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def round_to_odd(s, e):
    """s with its last bit set where the residual e is non-zero (s rounded to odd instead of to nearest)."""
    inexact = (e != 0) & np.isfinite(s)
    if not inexact.any():
        return s
    bits = np.array(s, dtype=np.float64).view(np.int64).copy()
    even = inexact & ((bits & 1) == 0)
    # move one ulp towards the exact value: away from zero when e has s's sign, towards zero otherwise
    away = np.signbit(e) == np.signbit(s)
    bits = np.where(even, np.where(away, bits + 1, bits - 1), bits)
    return bits.view(np.float64)


def to_f32(x, mode: str = "rn"):
    """float64 ``x`` rounded to float32 in ``mode`` (x must already be exact or rounded to odd)."""
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.asarray(x, dtype=np.float64).astype(np.float32)
    if mode == "rn":
        return r
    rd = r.astype(np.float64)
    if mode == "rz":
        wrong = np.abs(rd) > np.abs(x)
        toward = np.float32(0)
    elif mode == "rm":
        wrong = rd > x
        toward = np.float32(-np.inf)
    elif mode == "rp":
        wrong = rd < x
        toward = np.float32(np.inf)
    else:
        raise ValueError(mode)
    if wrong.any():
        r = np.where(wrong, np.nextafter(r, toward), r)
    return r


def directed_f64(s, e, mode: str):
    """float64 s = fl_rn(exact), e the exact residual: the exact value rounded in ``mode``."""
    if mode == "rn":
        return s
    if mode == "rz":
        wrong = (e != 0) & (np.signbit(e) != np.signbit(s))
        toward = 0.0
    elif mode == "rm":
        wrong = e < 0
        toward = -np.inf
    elif mode == "rp":
        wrong = e > 0
        toward = np.inf
    else:
        raise ValueError(mode)
    if wrong.any():
        s = np.where(wrong, np.nextafter(s, toward), s)
    return s


def canon32(r):
    """NaN results as the GPU writes them (0x7fffffff)."""
    nan = r != r
    if np.count_nonzero(nan):
        return np.where(nan, F32_CANON_NAN, r)
    return r


def canon64(r):
    nan = r != r
    if np.count_nonzero(nan):
        return np.where(nan, F64_CANON_NAN, r)
    return r


def ftz32(x):
    """Subnormal float32 flushed to zero of the same sign."""
    x = np.asarray(x, dtype=np.float32)
    sub = (x != 0) & (np.abs(x) < F32_MIN_NORMAL)
    if sub.any():
        return np.where(sub, np.copysign(np.float32(0), x), x)
    return x


def ftz64(x):
    x = np.asarray(x, dtype=np.float64)
    sub = (x != 0) & (np.abs(x) < F64_MIN_NORMAL)
    if sub.any():
        return np.where(sub, np.copysign(0.0, x), x)
    return x


def saturate(x):
    """Clamped to [0, 1], NaN to +0."""
    r = np.clip(x, 0, 1)
    nan = r != r
    if nan.any():
        r = np.where(nan, np.zeros((), dtype=r.dtype), r)
    return r


def f32_to_bf16_bits(x, mode: str = "rn"):
    """float32 -> bfloat16 raw bits (uint16), round to nearest even (or toward zero); NaN stays a quiet NaN."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    if mode == "rn":
        rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    elif mode == "rz":
        rounded = u >> 16
    else:
        raise ValueError(mode)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    out = np.where(nan, (u >> 16) | 0x40, rounded)
    return out.astype(np.uint16)


def bf16_bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
