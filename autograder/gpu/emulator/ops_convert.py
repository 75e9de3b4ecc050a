"""Moves and conversions: mov (incl. packing and unpacking vectors), cvt (int<->int, int<->float with every
rounding mode, float<->float, .sat, .ftz, f16, bf16), cvta (generic <-> state-space addresses)."""
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
    """Sign of x - r per lane, exactly: x a 64-bit integer array, r its float64 rounding (RN)."""
    signed = is_signed(at)
    with np.errstate(invalid="ignore", over="ignore"):
        top = r >= (2.0 ** 63 if signed else 2.0 ** 64)  # only 2**63 (2**64) itself: above every x
        back = np.where(top, 0.0, r).astype(SIGNED[64] if signed else UNSIGNED[64])
    return np.where(top, -1.0, np.where(x > back, 1.0, np.where(x < back, -1.0, 0.0)))


def _int_to_float(x, at, dt, mode):
    """Integer array -> float of type dt, rounded once in mode (rn rz rm rp)."""
    x = np.asarray(x)
    if dt == "f64":
        r = x.astype(np.float64)
        if TYPE_BITS[at] < 64 or mode == "rn":
            return r
        return rnd.directed_f64(r, _residual_sign(x, r, at), mode)
    if dt == "f16":
        r32 = _int_to_float(x, at, "f32", mode)
        if mode != "rn":
            raise Unsupported(f"cvt.{mode}.f16 from an integer")
        return r32.astype(np.float16)
    r = x.astype(np.float64)
    if TYPE_BITS[at] == 64:  # float64 rounded to odd, then once to float32 (53 >= 24 + 2 bits)
        r = rnd.round_to_odd(r, _residual_sign(x, r, at))
    return rnd.to_f32(r, mode)


def _float_to_int(x, dt, mode, at="f32"):
    """Float -> integer type dt, rounded by mode (rni rzi rmi rpi) and saturated.  NaN: 0, except from an f64
    source or to a 64-bit integer, where the H200 gives the sign-bit pattern (0x80000000, 0x8000000000000000;
    for unsigned types too)."""
    x = np.asarray(x, dtype=np.float64)
    r = _ROUND_INT[mode](x)
    bits = TYPE_BITS[dt]
    info = np.iinfo(DTYPE[dt])
    with np.errstate(invalid="ignore"):
        nan = np.isnan(r)
        hi = r >= float(info.max) + 1.0  # 2**31, 2**32, 2**63, 2**64: exact in float64
        lo = r < float(info.min)
        out = np.where(nan | hi | lo, 0.0, r).astype(DTYPE[dt])
    out = np.where(hi, np.array(info.max, dtype=DTYPE[dt]), out)
    out = np.where(lo, np.array(info.min, dtype=DTYPE[dt]), out)
    if nan.any():
        pattern = 1 << (bits - 1) if (at == "f64" or bits == 64) and bits >= 32 else 0  # 8/16 bits: not measured
        out = np.where(nan, np.array(pattern, dtype=UNSIGNED[bits]).view(DTYPE[dt]), out)
    return out


@opcode("cvt")
def build_cvt(ins, c):
    types = c.types_of(ins)
    if len(types) != 2:
        raise Unsupported("cvt types")
    dt, at = types
    mods = [p for p in ins.parts[1:] if p not in TYPE_BITS]
    rmode = next((p for p in mods if p in _IRND + _FRND), None)
    ftz = "ftz" in mods
    sat = "sat" in mods
    if set(mods) - set(_IRND + _FRND + ("ftz", "sat")):
        raise Unsupported("cvt modifier " + ".".join(mods))
    d = c.dst(ins.operands[0], dt)
    a = c.src(ins.operands[1], at)
    dfloat = dt in ("f16", "f32", "f64", "bf16")
    afloat = at in ("f16", "f32", "f64", "bf16")

    def pre(x):
        if at == "bf16":
            x = rnd.bf16_bits_to_f32(x)
        if ftz and at == "f32":
            x = rnd.ftz32(x)
        return x

    if afloat and dfloat:
        def convert(x):
            x = pre(x)
            if rmode in _IRND:  # round to an integral value in the same type
                r = _ROUND_INT[rmode](x)
            elif dt == "f64":
                r = np.asarray(x, dtype=np.float64)
            elif dt == "f32":
                if at == "f64":
                    r = rnd.to_f32(np.asarray(x, dtype=np.float64), rmode or "rn")
                else:
                    r = np.asarray(x, dtype=np.float32)
            elif dt == "f16":
                if (rmode or "rn") != "rn":
                    raise Unsupported(f"cvt.{rmode}.f16")
                r = np.asarray(x, dtype=np.float64).astype(np.float16) if at == "f64" else \
                    np.asarray(x, dtype=np.float32).astype(np.float16)
            elif dt == "bf16":
                r = rnd.f32_to_bf16_bits(np.asarray(x, dtype=np.float32), rmode or "rn")
                return r
            else:
                raise Unsupported(f"cvt.{dt}.{at}")
            if ftz and dt == "f32":
                r = rnd.ftz32(r)
            if sat:
                r = rnd.saturate(r)
            return r
    elif afloat:
        if rmode not in _IRND:
            raise Unsupported(f"cvt.{dt}.{at} without .rni/.rzi/.rmi/.rpi")

        def convert(x):
            return _float_to_int(pre(x), dt, rmode, at)
    elif dfloat:
        if rmode not in _FRND:
            raise Unsupported(f"cvt.{dt}.{at} without .rn/.rz/.rm/.rp")
        if dt == "bf16":
            raise Unsupported("cvt.bf16 from an integer")

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
