"""Moves and conversions: mov (incl. packing and unpacking vectors), cvt (int<->int, int<->float with every
rounding mode, float<->float, .sat, .ftz; f16, bf16, f16x2, bf16x2 and tf32 with every rounding mode, .relu),
cvta (generic <-> state-space addresses)."""
from __future__ import annotations

import numpy as np

from . import rounding as rnd
from .errors import Unsupported
from .memory import LOCAL_WINDOW, SHARED_WINDOW
from .program import DTYPE, PLAIN, SIGNED, UNSIGNED, Op, is_signed, opcode
from .ptx import TYPE_BITS


@opcode("mov")
def build_mov(ins, c):
    t = c.type_of(ins)
    dst, src = ins.operands[0], ins.operands[1]
    bits = TYPE_BITS[t]
    if dst.kind == "vec":  # unpack: the low part goes to the first register
        n = len(dst.items)
        part = bits // n
        a = c.src(src, t)
        sets = [c.dst(item, f"b{part}") for item in dst.items]
        u = UNSIGNED[bits]

        def run(m):
            x = np.asarray(a()).view(u) if np.ndim(a()) else np.array(a()).view(u)
            for k, s in enumerate(sets):
                s((x >> u(k * part)).astype(UNSIGNED[part]), m)
        return Op(PLAIN, run)
    if src.kind == "vec":  # pack
        n = len(src.items)
        part = bits // n
        gets = [c.src(item, f"b{part}") for item in src.items]
        d = c.dst(dst, t)
        u = UNSIGNED[bits]

        def run(m):
            r = np.zeros((), dtype=u)
            for k, g in enumerate(gets):
                r = r | (np.asarray(g()).astype(u) << u(k * part))
            d(r.view(DTYPE[t]) if r.ndim else np.array(r).view(DTYPE[t]), m)
        return Op(PLAIN, run)
    d = c.dst(dst, t)
    a = c.src(src, t)
    return Op(PLAIN, lambda m: d(a(), m))


_IRND = ("rni", "rzi", "rmi", "rpi")
_FRND = ("rn", "rz", "rm", "rp")
_ROUND_INT = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}


def _residual_sign(x, r, at):
    """The sign of x - r for a 64-bit integer array x and its float64 conversion r, exactly (in integers): r is an
    integer value, convertible back except where it is 2**63 (signed) or 2**64 (unsigned), above every x."""
    integer = SIGNED[64] if is_signed(at) else UNSIGNED[64]
    top = r >= (2.0 ** 63 if is_signed(at) else 2.0 ** 64)
    back = np.where(top, 0.0, r).astype(integer)
    return np.where(top, -1.0, np.where(x > back, 1.0, np.where(x < back, -1.0, 0.0)))


def _int_to_float(x, at, dt, mode):
    """Integer array -> float of type dt, rounded once in mode (rn rz rm rp); f16 and bf16 as raw bits.  Up to 32
    bits the float64 value is exact; a 64-bit integer's is corrected by the exact sign of its residual."""
    x = np.asarray(x)
    r = x.astype(np.float64)
    if TYPE_BITS[at] == 64:
        e = _residual_sign(x, r, at)
        if dt == "f64":
            return rnd.directed_f64(r, e, mode)
        r = rnd.round_to_odd(r, e)
    if dt == "f64":
        return r
    if dt in _NARROW:
        return _NARROW[dt](r, mode)
    return rnd.to_f32(r, mode)


def _nan_as_int(at, dt):
    """What the H200 converts a NaN to (golden data): 0 from f32 (and narrower) into up to 32 bits, else the
    destination's sign bit alone (0x80000000 from f64, 0x8000000000000000 into 64 bits; for unsigned types too).
    8- and 16-bit results from f64 (the sign bit here too) are not measured."""
    bits = TYPE_BITS[dt]
    if at != "f64" and bits <= 32:
        return np.zeros((), dtype=DTYPE[dt])
    return np.array(1 << (bits - 1), dtype=UNSIGNED[bits]).view(DTYPE[dt])[()]


def _float_to_int(x, at, dt, mode):
    """Float (of type at) -> integer type dt, rounded by mode (rni rzi rmi rpi), saturated; NaN as
    :func:`_nan_as_int`."""
    x = np.asarray(x, dtype=np.float64)
    r = _ROUND_INT[mode](x)
    info = np.iinfo(DTYPE[dt])
    nan = np.isnan(r)
    hi = r >= float(info.max) + 1.0  # 2**7 ... 2**64, the first value past the range: exact in float64
    lo = r < float(info.min)
    out = np.where(nan | hi | lo, 0.0, r).astype(DTYPE[dt])
    out = np.where(hi, np.array(info.max, dtype=DTYPE[dt]), out)
    out = np.where(lo, np.array(info.min, dtype=DTYPE[dt]), out)
    return np.where(nan, _nan_as_int(at, dt), out) if nan.any() else out


#: Encoders of the narrow float types: float64 (exact or rounded to odd), mode -> raw bits.
_NARROW = {"f16": rnd.f16_bits, "bf16": rnd.bf16_bits}
_FLOATS = ("f16", "f32", "f64", "bf16")


def _to_narrow(x, dt, mode, relu, sat):
    """A float value (float64-exact: f16, bf16 as float32, f32, f64) -> raw bits of f16, bf16 or tf32, rounded
    once in ``mode``; .relu and .sat clamp first (rounding keeps order, so clamping the exact value is the same)."""
    if dt == "tf32":  # from f32 only, without .relu and .sat; NaN payloads kept (not through float64)
        return rnd.tf32_bits(x, mode)
    x = np.asarray(x, dtype=np.float64)
    if relu:
        x = rnd.relu(x)
    if sat:
        x = rnd.saturate(x)
    return _NARROW[dt](x, mode)


def _packed_pair(convert):
    """cvt.*.f16x2.f32 / .bf16x2.f32 d, a, b: a's conversion in the upper half of d, b's in the lower."""
    def both(a, b):
        hi, lo = (np.asarray(convert(v)).astype(np.uint32) for v in (a, b))
        return (hi << np.uint32(16)) | lo
    return both


@opcode("cvt")
def build_cvt(ins, c):
    types = c.types_of(ins)
    if len(types) != 2:
        raise Unsupported("cvt types")
    dt, at = types
    mods = [p for p in ins.parts[1:] if p not in TYPE_BITS]
    rmode = next((p for p in mods if p in _IRND + _FRND + ("rna",)), None)
    ftz, sat, relu = "ftz" in mods, "sat" in mods, "relu" in mods
    if set(mods) - set(_IRND + _FRND + ("rna", "ftz", "sat", "relu")):
        raise Unsupported("cvt modifier " + ".".join(mods))
    packed = dt in ("f16x2", "bf16x2")
    narrow = dt.removesuffix("x2") if packed else dt
    if (relu or packed or rmode == "rna") and (narrow not in ("f16", "bf16", "tf32") or at != "f32"):
        raise Unsupported("cvt." + ".".join(ins.parts[1:]))
    if dt == "tf32" and (rmode != "rna" or relu or sat):
        raise Unsupported("cvt." + ".".join(ins.parts[1:]))
    word = {"f16": "b16", "bf16": "b16", "tf32": "b32"}.get(narrow)
    d = c.dst(ins.operands[0], "b32" if packed else word or dt)
    sources = [c.src(o, at) for o in ins.operands[1:3 if packed else 2]]
    dfloat = narrow in _FLOATS + ("tf32",)
    afloat = at in _FLOATS

    def pre(x):
        if at == "bf16":
            x = rnd.bf16_bits_to_f32(x)
        if ftz and at == "f32":
            x = rnd.ftz32(x)
        return x

    if afloat and dfloat:
        def convert(x):
            x = pre(x)
            mode = rmode or "rn"
            if rmode in _IRND:  # round to an integral value in the same type (exact from here on)
                x, mode = _ROUND_INT[rmode](x), "rn"
            if word is not None:
                return _to_narrow(x, narrow, mode, relu, sat)
            if dt == "f64":
                r = np.asarray(x, dtype=np.float64)
            elif at == "f64":
                r = rnd.to_f32(np.asarray(x, dtype=np.float64), mode)
            else:
                r = np.asarray(x, dtype=np.float32)
            if ftz and dt == "f32":
                r = rnd.ftz32(r)
            if sat:
                r = rnd.saturate(r)
            return r
    elif afloat:
        if rmode not in _IRND:
            raise Unsupported(f"cvt.{dt}.{at} without .rni/.rzi/.rmi/.rpi")

        def convert(x):
            return _float_to_int(pre(x), at, dt, rmode)
    elif dfloat:
        if rmode not in _FRND:
            raise Unsupported(f"cvt.{dt}.{at} without .rn/.rz/.rm/.rp")
        if sat and word is not None:
            raise Unsupported(f"cvt.sat.{dt}.{at}")

        def convert(x):
            r = _int_to_float(x, at, dt, rmode)
            return rnd.saturate(r) if sat else r
    else:
        dbits, abits = TYPE_BITS[dt], TYPE_BITS[at]
        info = np.iinfo(DTYPE[dt])

        def convert(x):
            x = np.asarray(x)
            if sat:
                wide = x.astype(np.float64) if abits == 64 else x.astype(np.int64)
                clipped = np.clip(wide, info.min, info.max)
                return clipped.astype(DTYPE[dt])
            # widening: extend by the source's signedness; narrowing: keep the low bits
            if dbits >= abits:
                return x.astype(SIGNED[abits] if is_signed(at) else UNSIGNED[abits]).astype(DTYPE[dt]) \
                    if abits > 1 else x.astype(DTYPE[dt])
            return x.astype(UNSIGNED[abits]).astype(UNSIGNED[dbits]).view(DTYPE[dt]) if x.ndim else \
                np.array(x.astype(UNSIGNED[abits]).astype(UNSIGNED[dbits])).view(DTYPE[dt])

    if packed:
        pair, (a, b) = _packed_pair(convert), sources
        return Op(PLAIN, lambda m: d(pair(a(), b()), m))
    (a,) = sources
    return Op(PLAIN, lambda m: d(convert(a()), m))


@opcode("cvta")
def build_cvta(ins, c):
    t = c.type_of(ins, ("u32", "u64"))
    parts = ins.parts[1:]
    to = "to" in parts
    space = next((p for p in parts if p in ("global", "shared", "local", "const", "param")), None)
    if space is None or space in ("const", "param"):
        raise Unsupported(f"cvta {'.'.join(parts)}")
    d = c.dst(ins.operands[0], t)
    a = c.src(ins.operands[1], t)
    base = {"global": 0, "shared": SHARED_WINDOW, "local": LOCAL_WINDOW}[space]
    if t == "u32" and base:
        raise Unsupported("32-bit generic addresses")
    dt = DTYPE[t]
    off = np.array(base, dtype=np.uint64)[()]
    if base == 0:
        return Op(PLAIN, lambda m: d(a(), m))
    if to:
        return Op(PLAIN, lambda m: d(np.subtract(a(), off, dtype=dt), m))
    return Op(PLAIN, lambda m: d(np.add(np.asarray(a()).astype(np.uint64), off, dtype=dt), m))
