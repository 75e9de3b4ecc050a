"""Floating-point arithmetic: add sub mul fma mad div rcp sqrt rsqrt ex2 lg2 sin cos tanh min max neg abs
(f32 and f64; .rn .rz .rm .rp, .ftz, .sat).

Exact where PTX is exact: add/sub/mul/div.rn/sqrt.rn/rcp.rn through NumPy (IEEE), fma.rn.f32 rounded once
(exact float64 product, TwoSum, round to odd, then to float32).  Directed modes of add/sub/mul/fma f32 are
exact too.  Approximations (ex2, lg2, rsqrt, tanh, div.full, rcp.approx.f32, sqrt.approx) are computed in
float64 and rounded once: a GPU is within its documented ulps of these, not bit-equal.  sin/cos.approx,
div.approx.f32 and rcp.approx.ftz.f64 follow the H200's own reduction, flushing and special values.
f64 add/sub/mul/fma in every mode are correctly rounded: TwoSum/TwoProd on the vector path, and the lanes near a
rounding boundary, at under- or overflow or with a zero result exactly, in Python integers (rounding.fma_f64);
div.rz/rm/rp.f64 are exact too (:func:`div64`).  The f16/bf16 forms of these mnemonics are ops_half's ("half"
builder family).
"""
from __future__ import annotations

import numpy as np

from . import rounding as rnd
from .errors import Unsupported
from .program import CONTRACTED, PLAIN, Op, opcode

_MODES = ("rn", "rz", "rm", "rp")
_KNOWN = {"rn", "rz", "rm", "rp", "ftz", "sat", "approx", "full", "f32", "f64"}


def _mods(ins, allowed):
    mods = set(ins.parts[1:])
    unknown = mods - allowed
    if unknown:
        raise Unsupported("modifier " + ", ".join("." + u for u in sorted(unknown)))
    mode = next((p for p in ins.parts[1:] if p in _MODES), "rn")
    return mods, mode


def _typ(ins, c):
    t = c.type_of(ins, ("f32", "f64"))
    return t


def _finish(t, mods):
    """Post-processing of a result: flush, saturate, canonical NaN."""
    steps = []
    if "ftz" in mods and t == "f32":
        steps.append(rnd.ftz32)
    if "sat" in mods:
        steps.append(rnd.saturate)
    steps.append(rnd.canon32 if t == "f32" else rnd.canon64)
    if len(steps) == 1:
        return steps[0]

    def fin(x):
        for s in steps:
            x = s(x)
        return x
    return fin


def _inputs(t, mods, getters):
    if "ftz" in mods and t == "f32":
        return [(lambda g=g: rnd.ftz32(g())) for g in getters]
    return getters


def _binary(ins, c, compute):
    mods, mode = _mods(ins, _KNOWN - {"approx", "full"})
    t = _typ(ins, c)
    d = c.dst(ins.operands[0], t)
    a, b = _inputs(t, mods, [c.src(o, t) for o in ins.operands[1:3]])
    fin = _finish(t, mods)
    f = compute(t, mode)

    def run(m):
        d(fin(f(a(), b())), m)
    return Op(PLAIN, run)


def _add(t, mode, sign=1):
    if mode == "rn":
        return (lambda x, y: x + y) if sign > 0 else (lambda x, y: x - y)
    if t == "f32":
        def f(x, y):
            xx = np.asarray(x, dtype=np.float64)
            yy = np.float64(sign) * np.asarray(y, dtype=np.float64)
            s, e = rnd.two_sum(xx, yy)
            r = rnd.to_f32(rnd.round_to_odd(s, e), mode)
            return rnd.rm_zero(r, xx, yy) if mode == "rm" else r
        return f

    def f64(x, y):
        return rnd.add_f64(x, np.float64(sign) * np.asarray(y, dtype=np.float64), mode)
    return f64


@opcode("add", family="float")
def build_add(ins, c):
    return _binary(ins, c, lambda t, mode: _add(t, mode, 1))


@opcode("sub", family="float")
def build_sub(ins, c):
    return _binary(ins, c, lambda t, mode: _add(t, mode, -1))


def _mul(t, mode):
    if mode == "rn":
        return lambda x, y: x * y
    if t == "f32":
        return lambda x, y: rnd.to_f32(np.asarray(x, dtype=np.float64) * np.asarray(y, dtype=np.float64), mode)

    return lambda x, y: rnd.mul_f64(x, y, mode)


@opcode("mul", family="float")
def build_mul(ins, c):
    return _binary(ins, c, _mul)


_LOW29 = np.uint64(0x1FFFFFFF)  # the float64 mantissa bits below float32's precision
_ABS64 = np.uint64(0x7FFFFFFFFFFFFFFF)
_TINY64 = np.uint64(np.array(1.2e-38).view(np.uint64) - 1)
_TIE = {"rn": np.uint64(0x10000000)}


def fma32(x, y, z, mode="rn"):
    """float32 x * y + z rounded once.

    The product is exact in float64; the float64 sum p + z is rounded once more.  Rounding that to float32 is
    wrong only where the float64 sum sits exactly on a float32 rounding boundary (a midpoint for RN, a float32
    value for the directed modes) or in float32's subnormal range, and there only where the sum was inexact:
    where every such sum is exact (TwoSum's residual 0; the usual case, e.g. 1 * v + w) it is rounded as it is,
    else :func:`fma32_exact` rounds those sums to odd first (the same bits, fewer NumPy calls)."""
    p = np.multiply(x, y, dtype=np.float64)
    s = np.add(p, z, dtype=np.float64)
    if s.ndim == 0:
        return fma32_exact(x, y, z, mode)
    u = s.view(np.uint64)
    boundary = (u & _LOW29) == _TIE.get(mode, 0)
    tiny = ((u & _ABS64) - np.uint64(1)) < _TINY64  # 0 < |s| < 1.2e-38 (NaN and 0 excluded)
    if rnd.nnz(boundary) or rnd.nnz(tiny):
        with np.errstate(invalid="ignore", over="ignore"):
            bb = s - p  # TwoSum's residual of p + z (over every lane: as cheap as picking the suspects out)
            e = (p - (s - bb)) + (z - bb)
        if rnd.nnz(e[boundary | tiny]):  # an inexact sum on a boundary (or an infinite sum's NaN residual)
            return fma32_exact(x, y, z, mode)
    r = rnd.to_f32(s, mode)
    return rnd.rm_zero(r, p, z) if mode == "rm" else r  # an exact zero sum is -0.0 under rm


def fma32_exact(x, y, z, mode="rn"):
    """:func:`fma32`, with every suspect float64 sum rounded to odd through TwoSum."""
    p = np.asarray(x, dtype=np.float64) * np.asarray(y, dtype=np.float64)
    zz = np.asarray(z, dtype=np.float64)
    s = p + zz
    low = np.asarray(s).view(np.int64) & 0x1FFFFFFF
    if mode == "rn":
        suspect = low == 0x10000000
    else:
        suspect = low == 0
    suspect = suspect | ((np.abs(s) < 1.2e-38) & (s != 0))  # a float64 sum that is 0 is exactly 0
    if suspect.any():
        pp, zs = np.broadcast_arrays(p, zz)
        s = np.array(s, dtype=np.float64, copy=True)
        sel = np.broadcast_to(suspect, s.shape)
        s2, e = rnd.two_sum(pp[sel], zs[sel])
        with np.errstate(invalid="ignore"):
            s[sel] = np.where(np.isfinite(s2), rnd.round_to_odd(s2, e), s2)
    r = rnd.to_f32(s, mode)
    return rnd.rm_zero(r, p, zz) if mode == "rm" else r


_F64 = np.float64
_U64 = np.uint64
_F32 = np.float32
_TIE_RN = _TIE["rn"]
_TINY = 1.2e-38  # the float64 sums below this (and non-zero) are fma32's "tiny" ones


def fma32_rn_canon(x, y, z):
    """canon32(fma32(x, y, z)) for float32 arrays (or NumPy scalars): the same bits and the same steps, in fewer and
    cheaper NumPy calls (float64 casts instead of ufuncs with a dtype, a float test for the tiny sums).  Runs inside
    Machine.run's ``np.errstate(all="ignore")`` (no errstate of its own)."""
    p = x.astype(_F64) * y.astype(_F64)  # as np.multiply/np.add with dtype=float64: the same bits
    zz = z.astype(_F64)
    s = p + zz
    if s.ndim == 0:
        return rnd.canon32(fma32(x, y, z))
    boundary = (s.view(_U64) & _LOW29) == _TIE_RN
    if rnd.nnz(np.abs(s) >= _TINY) == s.size:  # the usual case: no sum tiny, zero or NaN
        if rnd.nnz(boundary):
            bb = s - p  # as fma32: TwoSum's residual, and where a suspect sum is inexact, fma32_exact
            e = (p - (s - bb)) + (zz - bb)
            if rnd.nnz(e[boundary]):
                return rnd.canon32(fma32_exact(x, y, z))
        return s.astype(_F32)
    small = np.abs(s) < _TINY  # NaN compares false; tiny are the non-zero ones
    nb, ns = rnd.nnz(boundary), rnd.nnz(small)
    if nb or (ns and ns != rnd.nnz(s == 0)):
        bb = s - p
        e = (p - (s - bb)) + (zz - bb)
        if rnd.nnz(e[boundary | (small & (s != 0))]):
            return rnd.canon32(fma32_exact(x, y, z))
    r = s.astype(_F32)
    nan = r != r
    if rnd.nnz(nan):
        return np.where(nan, rnd.F32_CANON_NAN, r)
    return r


def fma64(x, y, z, mode="rn"):
    """float64 x * y + z rounded once, in any mode (:func:`rounding.fma_f64`)."""
    return rnd.fma_f64(x, y, z, mode)


@opcode("fma", "mad", family="float")
def build_fma(ins, c):
    mods, mode = _mods(ins, _KNOWN - {"approx", "full"})
    t = _typ(ins, c)
    d = c.dst(ins.operands[0], t)
    a, b, z = _inputs(t, mods, [c.src(o, t) for o in ins.operands[1:4]])
    fin = _finish(t, mods)
    f = fma32 if t == "f32" else fma64
    if t == "f32" and mode == "rn" and fin is rnd.canon32:  # no .ftz, no .sat
        def run_rn(m):
            d(fma32_rn_canon(a(), b(), z()), m)
        return Op(PLAIN, run_rn)

    def run(m):
        d(fin(f(a(), b(), z(), mode)), m)
    return Op(PLAIN, run)


def _directed_from_residual(r, sign, mode):
    """float32 ``r`` (RN of the exact value) moved one ulp where the exact value lies on the other side
    (``sign``: the sign of exact - r, computed exactly) and ``mode`` wants the other neighbour."""
    if mode == "rn":
        return r
    if mode == "rz":  # a step toward zero only where r overshot the exact value in magnitude
        wrong = ((sign < 0) & (r > 0)) | ((sign > 0) & (r < 0))
        toward = np.float32(0)
    elif mode == "rm":
        wrong = sign < 0
        toward = np.float32(-np.inf)
    else:
        wrong = sign > 0
        toward = np.float32(np.inf)
    if wrong.any():
        r = np.where(wrong, np.nextafter(r, toward), r)
    return r


def div32(x, y, mode="rn"):
    """float32 x / y in any rounding mode: RN through float64 (innocuous double rounding: 53 >= 2*24 + 2);
    directed modes round the float64 quotient to odd by the exact sign of x - q*y (TwoProd), then to float32 in the
    mode, so that overflow gives the largest finite value where the mode rounds towards it, and subnormal quotients
    round at the subnormal ulp."""
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32)
    if mode == "rn":
        return np.divide(x, y)
    with np.errstate(all="ignore"):
        xx, yy = x.astype(np.float64), y.astype(np.float64)
        q = xx / yy
        p, e = rnd.two_prod(q, yy)
        res = (xx - p) - e  # x - p is exact (Sterbenz); the sign of the float sum is the exact one
        sign = np.sign(res) * np.sign(yy)
        sign = np.where(np.isfinite(q) & (q != 0) & np.isfinite(sign), sign, 0.0)
        q = rnd.round_to_odd(q, sign)
    return rnd.to_f32(q, mode)


_TWO24 = np.float32(2.0 ** 24)


def div_approx32(x, y, ftz=False):
    """div.approx.f32: x * rcp(y) (PTX ISA), the reciprocal rounded once to float32 and flushed, so that for
    2^126 < |y| < 2^128 the quotient is 0 (x finite) or NaN (x infinite).  Without .ftz a subnormal y is first
    scaled by 2^24 (and the quotient back), as the H200's code does: 1 / 2^-149 is 2^149 -> inf, but
    2^-149 / 2^-149 is 1."""
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32)
    with np.errstate(all="ignore"):
        small = np.zeros(y.shape, bool) if ftz else (y != 0) & (np.abs(y) < rnd.F32_MIN_NORMAL)
        yy = np.where(small, y * _TWO24, y) if np.any(small) else y
        rc = rnd.ftz32((1.0 / yy.astype(np.float64)).astype(np.float32))
        r = x * rc
        return np.where(small, r * _TWO24, r) if np.any(small) else r


def div64(x, y, mode="rn"):
    """float64 x / y in any rounding mode: RN by NumPy, directed modes from the exact sign of x / y - q.

    That sign is the sign of x - q*y (times y's), computed on the mantissas (frexp) with q scaled alike, so
    nothing overflows or underflows: q*2^k is exact, its TwoProd with y's mantissa is exact, and the difference
    keeps the right sign (exact by Sterbenz where it is small)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    q = np.divide(x, y)
    if mode == "rn":
        return q
    with np.errstate(all="ignore"):
        mx, ex = np.frexp(x)
        my, ey = np.frexp(y)
        finite = np.isfinite(x) & np.isfinite(y) & (x != 0) & (y != 0)
        qs = np.where(np.isfinite(q), np.ldexp(q, ey - ex), np.sign(q) * 4.0)  # an overflow is above every finite
        p, e = rnd.two_prod(qs, my)
        residual = np.sign((mx - p) - e) * np.sign(my)
    return rnd.directed_f64(q, np.where(finite, residual, 0.0), mode)


def sqrt32(x, mode="rn"):
    x = np.asarray(x, dtype=np.float32)
    r = np.sqrt(x)
    if mode == "rn":
        return r
    with np.errstate(all="ignore"):
        sign = np.sign(x.astype(np.float64) - r.astype(np.float64) ** 2)
        sign = np.where(np.isfinite(r), sign, 0)
    return _directed_from_residual(r, sign, mode)


@opcode("div", family="float")
def build_div(ins, c):
    mods, mode = _mods(ins, _KNOWN)
    t = _typ(ins, c)
    d = c.dst(ins.operands[0], t)
    a, b = _inputs(t, mods, [c.src(o, t) for o in ins.operands[1:3]])
    fin = _finish(t, mods)
    if t == "f32" and "approx" in mods:
        ftz = "ftz" in mods

        def run(m):
            d(fin(div_approx32(a(), b(), ftz)), m)
    elif t == "f32":
        def run(m):
            d(fin(div32(a(), b(), mode)), m)
    else:
        def run(m):
            d(fin(div64(a(), b(), mode)), m)
    return Op(PLAIN, run)


def _unary(ins, c, f32, f64=None, modes=("rn",)):
    mods, mode = _mods(ins, _KNOWN)
    if mode not in modes:
        raise Unsupported(f"{ins.mnemonic}.{mode}")
    t = _typ(ins, c)
    if t == "f64" and f64 is None:
        raise Unsupported(f"{ins.mnemonic}.f64")
    f = f32 if t == "f32" else f64
    d = c.dst(ins.operands[0], t)
    (a,) = _inputs(t, mods, [c.src(ins.operands[1], t)])
    fin = _finish(t, mods)

    def run(m):
        d(fin(f(a())), m)
    return Op(PLAIN, run)


def _via64(fn):
    def f(x):
        return np.asarray(fn(np.asarray(x, dtype=np.float64)), dtype=np.float64).astype(np.float32)
    return f


_HIGH_WORD = np.uint64(0xFFFFFFFF00000000)


def rcp_approx_ftz64(x):
    """rcp.approx.ftz.f64 as the H200 computes it (MUFU.RCP64H): the reciprocal of the input's high word (the low
    32 bits read as zeros, so that 0x7ff00000_00000001 is inf and gives 0), truncated to its high word, subnormal
    inputs and results flushed.  The H200 data: 487 of 512 bit-equal, the rest one unit of the high word above."""
    x = np.asarray(x, dtype=np.float64)
    hi = rnd.ftz64((x.view(np.uint64) & _HIGH_WORD).view(np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = rnd.ftz64(1.0 / hi)
    return (r.view(np.uint64) & _HIGH_WORD).view(np.float64)


@opcode("rcp", family="float")
def build_rcp(ins, c):
    mode = next((p for p in ins.parts[1:] if p in _MODES), "rn")
    if mode != "rn" and "f32" in ins.parts:
        return _unary(ins, c, lambda x: div32(np.float32(1), x, mode), None, modes=(mode,))
    if "approx" in ins.parts and "f64" in ins.parts:
        return _unary(ins, c, None, rcp_approx_ftz64)
    return _unary(ins, c, lambda x: np.float32(1) / x, lambda x: 1.0 / x)


@opcode("sqrt", family="float")
def build_sqrt(ins, c):
    mode = next((p for p in ins.parts[1:] if p in _MODES), "rn")
    if mode != "rn" and "f32" in ins.parts:
        return _unary(ins, c, lambda x: sqrt32(x, mode), None, modes=(mode,))
    return _unary(ins, c, np.sqrt, np.sqrt)


@opcode("rsqrt", family="float")
def build_rsqrt(ins, c):
    return _unary(ins, c, _via64(lambda x: 1.0 / np.sqrt(x)), lambda x: 1.0 / np.sqrt(x))


_INV_2PI = np.array(0x3E22F983, dtype=np.uint32).view(np.float32)[()]  # float32(1 / 2pi)
_Q = 1 << 23  # a quarter turn in MUFU's fixed point (25 fraction bits)


def _sincos_approx(x, cosine):
    """sin.approx.f32 / cos.approx.f32 as the H200 computes them (measured on 274,016 inputs: every zero and
    sign bit-equal, values within 1.8e-7 of the GPU's): t = x * float32(1/2pi) rounded toward zero (FMUL.RZ),
    then MUFU.SIN/COS of t in turns: |t|'s fraction truncated to 25 bits, the quarter turn read from its top two
    bits, the position within it (23 bits) mirrored by one's complement in the odd quarters; sin is odd in t."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        t = rnd.to_f32(x.astype(np.float64) * np.float64(_INV_2PI), "rz").astype(np.float64)
        a = np.abs(t)
        finite = np.isfinite(a)
        a = np.where(finite, a, 0.0)
        turn = np.floor((a - np.floor(a)) * 2.0 ** 25).astype(np.int64)
        if cosine:
            turn = (turn + _Q) & (4 * _Q - 1)
        quarter, pos = turn >> 23, turn & (_Q - 1)
        pos = np.where(quarter & 1, _Q - 1 - pos, pos)
        v = np.sin((2 * np.pi / 2.0 ** 25) * pos.astype(np.float64))
        v = np.where(quarter >= 2, -v, v)
        if not cosine:
            v = np.where(np.signbit(t), -v, v)
        return np.where(finite, v, np.nan).astype(np.float32)


#: The approximate unary functions, computed in float64 and rounded once (the package docstring says how the GPU
#: differs); sin and cos follow the H200's range reduction and fixed-point argument (:func:`_sincos_approx`).
_APPROXIMATE = {"ex2": np.exp2, "lg2": np.log2, "tanh": np.tanh}


def _register_approximate(name, function):
    @opcode(name, family="float")
    def build(ins, c):
        return _unary(ins, c, _via64(function))
    build.__name__ = f"build_{name}"
    return build


for _name, _function in _APPROXIMATE.items():
    _register_approximate(_name, _function)


@opcode("sin", family="float")
def build_sin(ins, c):
    return _unary(ins, c, lambda x: _sincos_approx(x, False))


@opcode("cos", family="float")
def build_cos(ins, c):
    return _unary(ins, c, lambda x: _sincos_approx(x, True))


@opcode("neg", family="float")
def build_neg(ins, c):
    return _unary(ins, c, np.negative, np.negative)


@opcode("abs", family="float")
def build_abs(ins, c):
    return _unary(ins, c, np.abs, np.abs)


def _minmax(is_min, nan_propagates):
    pick = (np.minimum if is_min else np.maximum) if nan_propagates else (np.fmin if is_min else np.fmax)

    def f(x, y):
        r = pick(x, y)
        zero = (x == 0) & (y == 0)
        if zero.any():  # -0 is below +0
            sx, sy = np.signbit(x), np.signbit(y)
            neg = (sx | sy) if is_min else (sx & sy)
            r = np.where(zero, np.where(neg, -np.abs(r), np.abs(r)), r)
        return r
    return f


@opcode("min", "max", family="float")
def build_minmax(ins, c):
    mods, _ = _mods(ins, {"ftz", "NaN", "f32", "f64"})
    t = _typ(ins, c)
    d = c.dst(ins.operands[0], t)
    a, b = _inputs(t, mods, [c.src(o, t) for o in ins.operands[1:3]])
    fin = _finish(t, mods)
    f = _minmax(ins.mnemonic == "min", "NaN" in mods)

    def run(m):
        d(fin(f(a(), b())), m)
    return Op(PLAIN, run)


@opcode("copysign", family="float")
def build_copysign(ins, c):
    """copysign d, a, b: b's magnitude with a's sign (PTX operand order)."""
    t = _typ(ins, c)
    d = c.dst(ins.operands[0], t)
    a, b = (c.src(o, t) for o in ins.operands[1:3])
    return Op(PLAIN, lambda m: d(np.copysign(b(), a()), m))


@opcode("testp", family="float")
def build_testp(ins, c):
    t = _typ(ins, c)
    kind = ins.parts[1]
    tiny = np.finfo(np.float32 if t == "f32" else np.float64).tiny
    tests = {"finite": np.isfinite, "infinite": np.isinf, "number": lambda x: ~np.isnan(x), "notanumber": np.isnan,
             # the H200 says testp.normal.f32 of +-0.0 is true (golden data), the PTX ISA false; f64: not measured
             "normal": (lambda x: np.isfinite(x) & ((np.abs(x) >= tiny) | (x == 0))) if t == "f32" else
             (lambda x: np.isfinite(x) & (np.abs(x) >= tiny)),
             "subnormal": lambda x: (x != 0) & (np.abs(x) < tiny)}
    if kind not in tests:
        raise Unsupported(f"testp.{kind}")
    f = tests[kind]
    d = c.dst(ins.operands[0], "pred")
    a = c.src(ins.operands[1], t)
    return Op(PLAIN, lambda m: d(f(a()), m))


@opcode(CONTRACTED)
def build_contracted(ins, c, a_op, b_op, c_op, negate_product, negate_c):
    """An ``add.f32``/``sub.f32`` that ptxas fuses with the ``mul.f32`` feeding it: fma(±a, b, ±c), rounded once."""
    d = c.dst(ins.operands[0], "f32")
    a, b, z = (c.src(o, "f32") for o in (a_op, b_op, c_op))
    sa = np.float32(-1) if negate_product else np.float32(1)
    sz = np.float32(-1) if negate_c else np.float32(1)

    def run(m):
        d(rnd.canon32(fma32(sa * a(), b(), sz * z())), m)
    return Op(PLAIN, run)
