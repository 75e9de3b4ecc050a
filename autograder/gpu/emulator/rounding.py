"""Correct rounding on NumPy arrays: exact float64 intermediates, round-to-odd, directed rounding modes.

* The product of two float32 is exact in float64; a sum's exact residual comes from TwoSum.  Rounding the
  float64 value to odd (its last bit set when the residual is not zero) and then to float32 rounds the exact
  value correctly in every mode (float64 has more than two bits beyond float32's 24).
* Directed modes (rz, rm, rp) are RN plus a one-ulp correction where RN went the wrong way.
* Narrow formats (f16, bf16, tf32: :class:`Format`) are rounded once from float64 in any mode by
  :func:`round_to_format`; their sums and products are exact in float64 or rounded to odd first
  (:func:`odd_sum`), so no value is rounded twice.
* float64 add/mul/fma in any mode (:func:`add_f64`, :func:`mul_f64`, :func:`fma_f64`): TwoSum/TwoProd on the
  vector path; the rare lanes it cannot round (near a rounding boundary, under/overflow, exact zeros) are rounded
  exactly in Python integers (:func:`round_rational`).
"""
from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np

try:  # np.count_nonzero without axis is this built-in behind a Python wrapper (a third of its cost on small arrays)
    from numpy._core._multiarray_umath import count_nonzero as nnz
except ImportError:  # pragma: no cover
    nnz = np.count_nonzero

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
    if nnz(nan):
        return np.where(nan, F32_CANON_NAN, r)
    return r


def canon64(r):
    nan = r != r
    if nnz(nan):
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
    """.sat: clamped to [0, 1], NaN and -0 (and every negative value) to +0 (H200: add.rn.sat.f16 and
    add.rn.sat.f32 of -0 and -0 give +0); keeps the dtype."""
    x = np.asarray(x)
    return np.where(x > 0, np.minimum(x, np.ones((), x.dtype)), np.zeros((), x.dtype))


# --- narrow formats: f16, bf16, tf32 --------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Format:
    """A binary floating-point format: ``precision`` significand bits (the hidden one included), the exponents
    of its smallest and largest normal binades."""

    name: str
    precision: int
    emin: int
    emax: int

    @property
    def largest(self) -> float:
        return math.ldexp(2 ** self.precision - 1, self.emax - self.precision + 1)

    @property
    def smallest_normal(self) -> float:
        return math.ldexp(1.0, self.emin)


F16 = Format("f16", 11, -14, 15)
F32 = Format("f32", 24, -126, 127)
F64 = Format("f64", 53, -1022, 1023)
BF16 = Format("bf16", 8, -126, 127)
TF32 = Format("tf32", 11, -126, 127)
MODES = ("rn", "rna", "rz", "rm", "rp")


def round_to_format(x, fmt: Format, mode: str = "rn"):
    """float64 ``x`` rounded once to ``fmt`` in ``mode`` (rn: to nearest even, rna: to nearest, ties away from
    zero, rz, rm, rp), subnormals and overflow included; returns float64 holding the rounded value.

    ``x`` must be the exact value or that value rounded to odd in float64 (:func:`round_to_odd`): float64 keeps
    more than two bits beyond every narrow format, so the one rounding here is the correct rounding of the exact
    value.  Works on the magnitude scaled to whole units in the last place of ``fmt`` (scaling by a power of two
    and taking the integer part are exact)."""
    if mode not in MODES:
        raise ValueError(mode)
    x = np.asarray(x, dtype=np.float64)
    magnitude = np.abs(x)
    finite = np.isfinite(magnitude) & (magnitude != 0)
    magnitude = np.where(finite, magnitude, 1.0)
    exponent = np.frexp(magnitude)[1] - 1  # magnitude in [2**exponent, 2**(exponent + 1))
    quantum = np.maximum(exponent, fmt.emin) - (fmt.precision - 1)
    units = np.ldexp(magnitude, -quantum)
    whole = np.floor(units)
    rest = units - whole
    negative = np.signbit(x)
    if mode == "rn":
        up = (rest > 0.5) | ((rest == 0.5) & (np.fmod(whole, 2.0) == 1.0))
    elif mode == "rna":
        up = rest >= 0.5
    elif mode == "rz":
        up = np.zeros(x.shape, dtype=bool)
    elif mode == "rp":
        up = (rest > 0) & ~negative
    else:
        up = (rest > 0) & negative
    r = np.ldexp(whole + up, quantum)
    over = r > fmt.largest
    if over.any():
        to_infinity = {"rn": True, "rna": True, "rz": False, "rp": ~negative, "rm": negative}[mode]
        r = np.where(over, np.where(to_infinity, np.inf, fmt.largest), r)
    return np.where(finite, np.copysign(r, x), x)


def relu(x):
    """.relu: negative values and -0 to +0 (H200: cvt.rn.relu.bf16.f32 of -0), NaN stays NaN."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x <= 0, 0.0, x)


def odd_sum(a, b):
    """float64 a + b rounded to odd (exact input for :func:`round_to_format`; a and b finite or not)."""
    s, e = two_sum(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return round_to_odd(s, e)


F16_CANON_NAN = 0x7FFF
BF16_CANON_NAN = 0x7FFF


def f16_bits(x, mode: str = "rn"):
    """float64 ``x`` (exact or rounded to odd) -> float16 raw bits in ``mode``; NaN as the GPU's 0x7fff."""
    r = round_to_format(x, F16, mode).astype(np.float16).view(np.uint16)
    return np.where(np.isnan(np.asarray(x)), np.uint16(F16_CANON_NAN), r)


def f16_bits_to_f64(b):
    return np.asarray(b, dtype=np.uint16).view(np.float16).astype(np.float64)


def bf16_bits(x, mode: str = "rn"):
    """float64 ``x`` (exact or rounded to odd) -> bfloat16 raw bits in ``mode``; NaN as the GPU's 0x7fff."""
    r = round_to_format(x, BF16, mode).astype(np.float32).view(np.uint32) >> np.uint32(16)
    return np.where(np.isnan(np.asarray(x)), np.uint16(BF16_CANON_NAN), r.astype(np.uint16))


def bf16_bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def tf32_bits(x, mode: str = "rna"):
    """float32 -> tf32 (float32 bits with the low 13 cleared), rounded in ``mode``; the H200 truncates the
    payload of a NaN (so 0x7f800001 becomes inf: golden data, cvt.rna.tf32.f32)."""
    x = np.asarray(x, dtype=np.float32)
    r = round_to_format(x.astype(np.float64), TF32, mode).astype(np.float32).view(np.uint32)
    return np.where(np.isfinite(x), r, x.view(np.uint32) & np.uint32(0xFFFFE000))


# --- exact rounding of rationals (per lane, Python integers): for the rare lanes the vector paths cannot round --
def round_rational(q, fmt: Format = F64, mode: str = "rn", zero_negative: bool = False) -> float:
    """The exact rational ``q`` (int or Fraction) rounded once to ``fmt`` (a :class:`Format`: F32, F64 and the
    narrower ones) in ``mode`` (rn rz rm rp),
    as IEEE 754 does it: at the subnormal quantum below the normal range, overflow to infinity where the mode
    rounds away from zero and to the largest finite value where it rounds towards zero (rz; rm of a positive,
    rp of a negative value).  A zero ``q`` gives -0.0 where ``zero_negative``.  Returns a Python float (an f32
    result is exact in it)."""
    if q == 0:
        return -0.0 if zero_negative else 0.0
    precision, emin, emax = fmt.precision, fmt.emin, fmt.emax
    neg = q < 0
    a = -q if neg else q
    num, den = (a.numerator, a.denominator)
    e = num.bit_length() - den.bit_length()  # 2**e <= a < 2**(e + 1) after the correction below
    if (num << max(0, -e)) < (den << max(0, e)):
        e -= 1
    quantum = max(e, emin) - (precision - 1)
    n, d = (num, den << quantum) if quantum >= 0 else (num << -quantum, den)
    m, rem = divmod(n, d)
    if rem:
        if mode == "rn":
            up = 2 * rem > d or (2 * rem == d and m & 1)
        elif mode == "rz":
            up = False
        elif mode == "rm":
            up = neg
        elif mode == "rp":
            up = not neg
        else:
            raise ValueError(mode)
        m += int(up)
    if m == 0:
        return -0.0 if neg else 0.0
    if m.bit_length() + quantum > emax + 1:  # overflow
        toward_zero = mode == "rz" or (mode == "rm" and not neg) or (mode == "rp" and neg)
        big = fmt.largest if toward_zero else math.inf
        return -big if neg else big
    r = math.ldexp(m, quantum)
    return -r if neg else r


def _exact_zero_negative(mode, sign_a, sign_b, both_zero):
    """IEEE sign of an exactly zero sum a + b: the operands' sign where both are zeros of one sign, else -0 in
    rm and +0 otherwise."""
    if both_zero and sign_a == sign_b:
        return sign_a
    return mode == "rm"


def fma_exact(x, y, z, mode: str = "rn", fmt: Format = F64):
    """x * y + z rounded once, lane by lane in Python integers (slow: for the lanes a vector path cannot round).
    Infinities and NaNs as IEEE 754 (a finite product overflowing is no infinity: inf - huge product = inf)."""
    x, y, z = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (x, y, z)))
    out = np.empty(x.shape, dtype=np.float64)
    for i, (a, b, c) in enumerate(zip(x.flat, y.flat, z.flat)):
        a, b, c = float(a), float(b), float(c)
        if not (math.isfinite(a) and math.isfinite(b)):
            out.flat[i] = a * b + c
        elif not math.isfinite(c):
            out.flat[i] = c
        else:
            q = Fraction(a) * Fraction(b) + Fraction(c)
            sp = math.copysign(1.0, a) * math.copysign(1.0, b) < 0
            zneg = _exact_zero_negative(mode, sp, math.copysign(1.0, c) < 0, (a == 0 or b == 0) and c == 0)
            out.flat[i] = round_rational(q, fmt, mode, zneg)
    return out


def add_exact(x, y, mode: str = "rn", fmt: Format = F64):
    """x + y rounded once, lane by lane (see :func:`fma_exact`)."""
    return fma_exact(x, np.float64(1.0), y, mode, fmt)


def mul_exact(x, y, mode: str = "rn", fmt: Format = F64):
    """x * y rounded once, lane by lane (see :func:`fma_exact`); the sign of a zero product is the operands'."""
    x, y = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
    out = np.empty(x.shape, dtype=np.float64)
    for i, (a, b) in enumerate(zip(x.flat, y.flat)):
        a, b = float(a), float(b)
        if not (math.isfinite(a) and math.isfinite(b)):
            out.flat[i] = a * b
        else:
            neg = math.copysign(1.0, a) * math.copysign(1.0, b) < 0
            out.flat[i] = round_rational(Fraction(a) * Fraction(b), fmt, mode, neg)
    return out


def _fix_lanes(out, suspect, exact, *args):
    """``out`` with the ``suspect`` lanes replaced by ``exact(*their args)``."""
    if not np.any(suspect):
        return out
    out = np.array(out, dtype=np.float64, copy=True)
    sel = np.broadcast_to(suspect, out.shape)
    parts = [np.broadcast_to(np.asarray(a, dtype=np.float64), out.shape)[sel] for a in args]
    out[sel] = exact(*parts)
    return out


def rm_zero(r, a, b):
    """Under rm, an exactly zero sum a + b (float64 addends whose float64 sum is zero only where the exact sum
    is) is -0.0 unless both addends are +0.0 (IEEE 754 6.3); a non-zero sum rounded to zero keeps its sign."""
    with np.errstate(invalid="ignore"):
        zero = (r == 0) & (np.asarray(a) + np.asarray(b) == 0)
    if not np.any(zero):
        return r
    plus = (a == 0) & (b == 0) & ~np.signbit(a) & ~np.signbit(b)
    return np.where(zero, np.where(plus, np.zeros((), r.dtype), -np.zeros((), r.dtype)), r)


_TINY_SAFE = 2.0 ** -960  # below it a product's error term (TwoProd) may underflow
_HUGE_SAFE = 2.0 ** 995   # above it Veltkamp's split overflows


def _half_spacing(r):
    """Half the distance from |r| to the next float64 towards zero (the narrower half of r's rounding interval)."""
    a = np.abs(r)
    return (a - np.nextafter(a, 0.0)) * 0.5


def add_f64(x, y, mode: str):
    """float64 x + y in any rounding mode, correctly rounded (TwoSum; overflow and exact zeros lane by lane)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        s, e = two_sum(x, y)
        ok = np.isfinite(s) & np.isfinite(e) & (s != 0)
        r = directed_f64(s, np.where(ok, e, 0.0), mode)
    return _fix_lanes(r, ~ok, lambda a, b: add_exact(a, b, mode), x, y)


def mul_f64(x, y, mode: str):
    """float64 x * y in any rounding mode, correctly rounded (TwoProd; under/overflow lane by lane)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        p, e = two_prod(x, y)
        ax, ay = np.abs(x), np.abs(y)
        zero = (x == 0) | (y == 0)
        ok = np.isfinite(p) & (ax < _HUGE_SAFE) & (ay < _HUGE_SAFE) & \
            (zero | ((np.abs(p) >= _TINY_SAFE) & (ax >= _TINY_SAFE) & (ay >= _TINY_SAFE)))
        r = directed_f64(p, np.where(ok & ~zero, e, 0.0), mode)
    return _fix_lanes(r, ~ok, lambda a, b: mul_exact(a, b, mode), x, y)


def fma_f64(x, y, z, mode: str = "rn"):
    """float64 x * y + z rounded once in any mode.

    Vector path: TwoProd, TwoSum, then exact = r + re + te with r = fl(s + t); r (or its neighbour in a directed
    mode, by the sign of re + te) is the answer wherever |re| + |te| is below half the spacing at r.  The other
    lanes (near a rounding boundary, under/overflow, zero or non-finite results) are rounded exactly one by one."""
    x, y, z = (np.asarray(v, dtype=np.float64) for v in (x, y, z))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        p, pe = two_prod(x, y)
        s, se = two_sum(p, z)
        t, te = two_sum(pe, se)
        r, re = two_sum(s, t)
        ax, ay = np.abs(x), np.abs(y)
        zero = (x == 0) | (y == 0)
        ok = np.isfinite(r) & np.isfinite(z) & (r != 0) & (ax < _HUGE_SAFE) & (ay < _HUGE_SAFE) & \
            (zero | ((np.abs(p) >= _TINY_SAFE) & (ax >= _TINY_SAFE) & (ay >= _TINY_SAFE))) & \
            (np.abs(re) + np.abs(te) < _half_spacing(r))
        out = directed_f64(r, np.where(ok, re + te, 0.0), mode)
    return _fix_lanes(out, ~ok, lambda a, b, c: fma_exact(a, b, c, mode), x, y, z)
