"""Integer and bit operations: add sub mul mad (.lo .hi .wide) mul24 mad24 div rem neg abs min max and or xor not
cnot shl shr popc clz brev bfe bfi prmt (every mode); comparisons (setp, int and float) and selp.

Integers wrap modulo 2**n as on the GPU (NumPy arrays of the instruction's type).  Division by zero gives what
the GPU's integer division routine gives for u32 (all ones) and 0 remainder semantics of C are kept (rem has
the sign of the dividend).
"""
from __future__ import annotations

import numpy as np

from .errors import Unsupported
from .program import DTYPE, PLAIN, SIGNED, UNSIGNED, Op, is_signed, opcode
from .ptx import TYPE_BITS
from .rounding import ftz32

_INT = ("b8", "u8", "s8", "b16", "u16", "s16", "b32", "u32", "s32", "b64", "u64", "s64")


def _check(ins, allowed_mods):
    extra = [p for p in ins.parts[1:] if p not in allowed_mods and p not in TYPE_BITS]
    if extra:
        raise Unsupported("modifier " + ", ".join("." + e for e in extra))


def _wide_type(t):
    bits = TYPE_BITS[t] * 2
    if bits > 64:
        raise Unsupported(f".wide.{t}")
    return (SIGNED if is_signed(t) else UNSIGNED)[bits], ("s" if is_signed(t) else "u") + str(bits)


def _mul_hi(x, y, t):
    bits = TYPE_BITS[t]
    if bits <= 32:
        wt = np.int64 if is_signed(t) else np.uint64
        return ((np.asarray(x).astype(wt) * np.asarray(y).astype(wt)) >> bits).astype(DTYPE[t])
    # 64 x 64 -> high 64 bits, by 32-bit halves
    ux = np.asarray(x).view(np.uint64) if np.ndim(x) else np.array(x).view(np.uint64)
    uy = np.asarray(y).view(np.uint64) if np.ndim(y) else np.array(y).view(np.uint64)
    m32 = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    a0, a1, b0, b1 = ux & m32, ux >> s32, uy & m32, uy >> s32
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> s32) + (p01 & m32) + (p10 & m32)
    hi = p11 + (p01 >> s32) + (p10 >> s32) + (mid >> s32)
    if is_signed(t):  # signed correction: hi -= (x < 0) * y + (y < 0) * x
        hi = hi - np.where(np.asarray(x) < 0, uy, np.uint64(0)) - np.where(np.asarray(y) < 0, ux, np.uint64(0))
    return hi.view(DTYPE[t])


@opcode("add", "sub", family="int")
def build_addsub(ins, c):
    _check(ins, {"sat"})
    t = c.type_of(ins, _INT)
    d = c.dst(ins.operands[0], t)
    a, b = (c.src(o, t) for o in ins.operands[1:3])
    if "sat" in ins.parts:
        if t != "s32":
            raise Unsupported(f"{ins.mnemonic}.sat.{t}")
        sign = 1 if ins.mnemonic == "add" else -1

        def run_sat(m):
            r = np.asarray(a()).astype(np.int64) + sign * np.asarray(b()).astype(np.int64)
            d(np.clip(r, -2**31, 2**31 - 1).astype(np.int32), m)
        return Op(PLAIN, run_sat)
    if ins.mnemonic == "add":
        def run(m):
            d(np.add(a(), b(), dtype=DTYPE[t]), m)
    else:
        def run(m):
            d(np.subtract(a(), b(), dtype=DTYPE[t]), m)
    return Op(PLAIN, run)


def _product(ins, c):
    """The product of mul/mad (lo, hi or wide), its destination type and the destination: (product(), type, d)."""
    _check(ins, {"lo", "hi", "wide"})
    t = c.type_of(ins, _INT)
    a, b = (c.src(o, t) for o in ins.operands[1:3])
    if "wide" in ins.parts:
        wdt, wt = _wide_type(t)
        return (lambda: np.multiply(np.asarray(a()).astype(wdt), np.asarray(b()).astype(wdt), dtype=wdt)), wt, \
            c.dst(ins.operands[0], wt)
    if "hi" in ins.parts:
        return (lambda: _mul_hi(a(), b(), t)), t, c.dst(ins.operands[0], t)
    return (lambda: np.multiply(a(), b(), dtype=DTYPE[t])), t, c.dst(ins.operands[0], t)


@opcode("mul", family="int")
def build_mul(ins, c):
    product, _, d = _product(ins, c)

    def run(m):
        d(product(), m)
    return Op(PLAIN, run)


@opcode("mad", family="int")
def build_mad(ins, c):
    product, t, d = _product(ins, c)
    z, dt = c.src(ins.operands[3], t), DTYPE[t]

    def run(m):
        d(np.add(product(), z(), dtype=dt), m)
    return Op(PLAIN, run)


def _product24(ins, c):
    """mul24/mad24's product of the low 24 bits of a and b (sign-extended for .s32), low or high 32 bits of the
    48-bit product: (product(), d)."""
    _check(ins, {"lo", "hi"})
    t = c.type_of(ins, ("u32", "s32"))
    a, b = (c.src(o, t) for o in ins.operands[1:3])
    shift = np.int64(16) if "hi" in ins.parts else np.int64(0)

    def low24(x):
        x = np.asarray(x).astype(np.int64) & np.int64(0xFFFFFF)
        return np.where(x & np.int64(0x800000), x - np.int64(1 << 24), x) if is_signed(t) else x

    def product():
        p = (low24(a()) * low24(b())) >> shift
        return (p & np.int64(0xFFFFFFFF)).astype(np.uint32).view(DTYPE[t])
    return product, c.dst(ins.operands[0], t), t


@opcode("mul24", family="int")
def build_mul24(ins, c):
    product, d, _ = _product24(ins, c)
    return Op(PLAIN, lambda m: d(product(), m))


@opcode("mad24", family="int")
def build_mad24(ins, c):
    product, d, t = _product24(ins, c)
    z = c.src(ins.operands[3], t)
    return Op(PLAIN, lambda m: d(np.add(product(), z(), dtype=DTYPE[t]), m))


def _divrem(x, y, t, want_rem):
    x = np.asarray(x)
    y = np.asarray(y)
    dt = DTYPE[t]
    zero = y == 0
    ys = np.where(zero, np.ones((), dtype=dt), y).astype(dt)
    if is_signed(t):
        bits = TYPE_BITS[t]
        # C semantics (truncation); INT_MIN / -1 wraps to INT_MIN
        x64 = x.astype(np.int64) if bits < 64 else x
        y64 = ys.astype(np.int64) if bits < 64 else ys
        with np.errstate(all="ignore"):
            r = np.fmod(x64, y64)
            q = np.where(y64 == -1, -x64, (x64 - r) // np.where(y64 == -1, 1, y64))
        q, r = q.astype(dt), r.astype(dt)
        q = np.where(zero, np.array(-1, dtype=dt), q)
        r = np.where(zero, x, r)
    else:
        q = x // ys
        r = x % ys
        q = np.where(zero, np.array(np.iinfo(dt).max, dtype=dt), q)
        r = np.where(zero, x, r)
    return (r if want_rem else q).astype(dt)


@opcode("div", "rem", family="int")
def build_divrem(ins, c):
    _check(ins, set())
    t = c.type_of(ins, _INT)
    d = c.dst(ins.operands[0], t)
    a, b = (c.src(o, t) for o in ins.operands[1:3])
    want_rem = ins.mnemonic == "rem"

    def run(m):
        d(_divrem(a(), b(), t, want_rem), m)
    return Op(PLAIN, run)


def _simple(ins, c, f, n_src=2, types=_INT):
    _check(ins, set())
    t = c.type_of(ins, types)
    d = c.dst(ins.operands[0], t)
    srcs = [c.src(o, t) for o in ins.operands[1:1 + n_src]]
    if n_src == 1:
        (a,) = srcs

        def run(m):
            d(f(a()), m)
    elif n_src == 2:
        a, b = srcs

        def run(m):
            d(f(a(), b()), m)
    else:
        def run(m):
            d(f(*(s() for s in srcs)), m)
    return Op(PLAIN, run)


@opcode("min", family="int")
def build_min(ins, c):
    return _simple(ins, c, np.minimum)


@opcode("max", family="int")
def build_max(ins, c):
    return _simple(ins, c, np.maximum)


@opcode("neg", family="int")
def build_neg(ins, c):
    t = c.type_of(ins, _INT)
    return _simple(ins, c, lambda x: np.subtract(np.zeros((), DTYPE[t]), x, dtype=DTYPE[t]), 1)


@opcode("abs", family="int")
def build_abs(ins, c):
    return _simple(ins, c, np.abs, 1)


_LOGIC = _INT + ("pred",)


@opcode("and", family="int")
def build_and(ins, c):
    return _simple(ins, c, np.bitwise_and, types=_LOGIC)


@opcode("or", family="int")
def build_or(ins, c):
    return _simple(ins, c, np.bitwise_or, types=_LOGIC)


@opcode("xor", family="int")
def build_xor(ins, c):
    return _simple(ins, c, np.bitwise_xor, types=_LOGIC)


@opcode("not", family="int")
def build_not(ins, c):
    return _simple(ins, c, np.invert, 1, types=_LOGIC)


@opcode("cnot", family="int")
def build_cnot(ins, c):
    t = c.type_of(ins, _INT)
    return _simple(ins, c, lambda x: (np.asarray(x) == 0).astype(DTYPE[t]), 1)


def _shift(ins, c, left):
    _check(ins, set())
    t = c.type_of(ins, _INT)
    bits = TYPE_BITS[t]
    d = c.dst(ins.operands[0], t)
    a = c.src(ins.operands[1], t)
    b = c.src(ins.operands[2], "u32")
    dt = DTYPE[t]
    count = c._reg(ins.operands[2])
    if count.kind == "imm" and 0 <= int(count.value) < bits:
        # a constant count below the width (shl.b32 %r, %r, 9): the general path's shift with nothing clamped
        k = np.array(int(count.value), dtype=dt)[()]
        shift = np.left_shift if left else np.right_shift

        def run_const(m):
            d(shift(np.asarray(a()), k, dtype=dt), m)
        return Op(PLAIN, run_const)

    def run(m):
        x = np.asarray(a())
        n = np.minimum(np.asarray(b()), np.uint32(bits)).astype(dt)
        big = n >= bits
        safe = np.where(big, np.zeros((), dt), n).astype(dt)
        if left:
            r = np.left_shift(x, safe, dtype=dt)
            r = np.where(big, np.zeros((), dt), r)
        else:
            r = np.right_shift(x, safe, dtype=dt)
            if big.any():
                fill = np.where(x < 0, np.array(-1, dt), np.zeros((), dt)) if is_signed(t) else np.zeros((), dt)
                r = np.where(big, fill, r)
        d(r.astype(dt), m)
    return Op(PLAIN, run)


@opcode("shl", family="int")
def build_shl(ins, c):
    return _shift(ins, c, True)


@opcode("shr", family="int")
def build_shr(ins, c):
    return _shift(ins, c, False)


def _popc(x, bits):
    u = np.asarray(x).view(UNSIGNED[bits]) if np.ndim(x) else np.array(x).view(UNSIGNED[bits])
    return np.bitwise_count(u).astype(np.uint32)


def _bit_count_operands(ins, c):
    """popc/clz: the b32/b64 source, its width and the u32 destination."""
    t = c.type_of(ins, ("b32", "b64"))
    return c.src(ins.operands[1], t), TYPE_BITS[t], c.dst(ins.operands[0], "u32")


@opcode("popc", family="int")
def build_popc(ins, c):
    a, bits, d = _bit_count_operands(ins, c)
    return Op(PLAIN, lambda m: d(_popc(a(), bits), m))


@opcode("clz", family="int")
def build_clz(ins, c):
    a, bits, d = _bit_count_operands(ins, c)

    def run(m):
        u = np.asarray(a()).view(UNSIGNED[bits]).astype(np.uint64)
        # smear the highest set bit down, count the ones
        for s in (1, 2, 4, 8, 16, 32):
            u = u | (u >> np.uint64(s))
        d((bits - np.bitwise_count(u & np.uint64((1 << bits) - 1))).astype(np.uint32), m)
    return Op(PLAIN, run)


def _bit_operands(ins, c, sources: int):
    """A b32/b64 bit instruction's type, width, destination and its first ``sources`` sources of that type."""
    t = c.type_of(ins, ("b32", "b64"))
    return t, TYPE_BITS[t], c.dst(ins.operands[0], t), [c.src(o, t) for o in ins.operands[1:1 + sources]]


@opcode("brev", family="int")
def build_brev(ins, c):
    t, bits, d, (a,) = _bit_operands(ins, c, 1)

    def run(m):
        u = np.asarray(a()).view(UNSIGNED[bits]).astype(np.uint64)
        r = np.zeros_like(u)
        for i in range(bits):
            r |= ((u >> np.uint64(i)) & np.uint64(1)) << np.uint64(bits - 1 - i)
        d(r.astype(UNSIGNED[bits]).view(DTYPE[t]), m)
    return Op(PLAIN, run)


def _low_ones(n):
    """uint64 masks of the ``n`` (0..64) lowest bits."""
    return np.where(n >= 64, np.uint64(0xFFFFFFFFFFFFFFFF), (np.uint64(1) << np.minimum(n, np.uint64(63))) - np.uint64(1))


def _position_and_length(pos_, len_, bits=32):
    """bfe/bfi's position and length operands as uint64: their low bytes (PTX ISA) for 32-bit types; for 64-bit
    types the whole u32 values, as the H200 computes them (ptxas emulates the 64-bit forms; its code does not
    mask: pos 0x100 is past bit 63, len 0x100 is everything, in all 512 golden elements)."""
    p, n = np.asarray(pos_()).astype(np.uint64), np.asarray(len_()).astype(np.uint64)
    if bits == 64:
        return p, n
    return p & np.uint64(0xFF), n & np.uint64(0xFF)


@opcode("bfe", family="int")
def build_bfe(ins, c):
    t = c.type_of(ins, ("u32", "s32", "u64", "s64"))
    bits = TYPE_BITS[t]
    d = c.dst(ins.operands[0], t)
    a = c.src(ins.operands[1], t)
    pos_, len_ = c.src(ins.operands[2], "u32"), c.src(ins.operands[3], "u32")

    def run(m):
        x = np.asarray(a()).view(UNSIGNED[bits]).astype(np.uint64) if np.ndim(a()) else \
            np.array(a()).view(UNSIGNED[bits]).astype(np.uint64)
        p, n = _position_and_length(pos_, len_, bits)
        p_c = np.minimum(p, np.uint64(bits))
        field = np.where(p_c >= bits, np.uint64(0), x >> np.minimum(p_c, np.uint64(bits - 1)))
        nn = np.minimum(n, np.uint64(bits))
        r = field & _low_ones(nn)
        if is_signed(t):  # PTX: bits past the msb, and all bits past len, are the sign bit a[min(pos+len-1, msb)]
            eff = np.minimum(nn, np.where(p_c >= bits, np.uint64(0), np.uint64(bits) - p_c))
            emask = _low_ones(eff)
            top = np.minimum(p + n - np.minimum(n, np.uint64(1)), np.uint64(bits - 1))
            sbit = np.where(n == 0, np.uint64(0), (x >> top) & np.uint64(1))
            r = (field & emask) | np.where(sbit == 1, ~emask, np.uint64(0))
        d(r.astype(UNSIGNED[bits]).view(DTYPE[t]), m)
    return Op(PLAIN, run)


@opcode("bfi", family="int")
def build_bfi(ins, c):
    t, bits, d, (a, b) = _bit_operands(ins, c, 2)
    pos_, len_ = c.src(ins.operands[3], "u32"), c.src(ins.operands[4], "u32")

    def run(m):
        x = np.asarray(a()).astype(np.uint64)
        y = np.asarray(b()).astype(np.uint64)
        p, n = _position_and_length(pos_, len_, bits)
        field = _low_ones(np.minimum(n, np.uint64(64)))
        inside = p < bits
        mask = np.where(inside, field << np.minimum(p, np.uint64(bits - 1)), np.uint64(0))
        r = (y & ~mask) | ((x << np.minimum(p, np.uint64(63))) & mask)
        d((r & np.uint64((1 << bits) - 1)).astype(UNSIGNED[bits]).view(DTYPE[t]), m)
    return Op(PLAIN, run)


#: prmt's fixed modes: for the selector's two low bits, the source byte (of b:a, a = bytes 0-3) of each
#: destination byte, d.b0 first (PTX ISA, "prmt").
_PRMT_MODES = {
    "f4e": ((0, 1, 2, 3), (1, 2, 3, 4), (2, 3, 4, 5), (3, 4, 5, 6)),
    "b4e": ((0, 7, 6, 5), (1, 0, 7, 6), (2, 1, 0, 7), (3, 2, 1, 0)),
    "rc8": ((0, 0, 0, 0), (1, 1, 1, 1), (2, 2, 2, 2), (3, 3, 3, 3)),
    "ecl": ((0, 1, 2, 3), (1, 1, 2, 3), (2, 2, 2, 3), (3, 3, 3, 3)),
    "ecr": ((0, 0, 0, 0), (0, 1, 1, 1), (0, 1, 2, 2), (0, 1, 2, 3)),
    "rc16": ((0, 1, 0, 1), (2, 3, 2, 3), (0, 1, 0, 1), (2, 3, 2, 3)),
}


def _prmt_generic(x, sel):
    """The default mode: each selector nibble picks a byte of b:a (bits 0-2) and may replicate its sign (bit 3)."""
    r = np.zeros(np.broadcast(x, sel).shape, dtype=np.uint64)
    for k in range(4):
        nib = (sel >> np.uint64(4 * k)) & np.uint64(0xF)
        byte = (x >> ((nib & np.uint64(7)) * np.uint64(8))) & np.uint64(0xFF)
        byte = np.where(nib & np.uint64(8), np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0)), byte)
        r |= byte << np.uint64(8 * k)
    return r


def _prmt_fixed(mode):
    """A fixed mode: the selector's two low bits pick a row of :data:`_PRMT_MODES`."""
    table = np.array(_PRMT_MODES[mode], dtype=np.uint64)  # (selector, destination byte) -> source byte

    def permute(x, sel):
        rows = table[(sel & np.uint64(3)).astype(np.int64)]
        r = np.zeros(np.broadcast(x, sel).shape, dtype=np.uint64)
        for k in range(4):
            r |= ((x >> (rows[..., k] * np.uint64(8))) & np.uint64(0xFF)) << np.uint64(8 * k)
        return r
    return permute


@opcode("prmt", family="int")
def build_prmt(ins, c):
    """prmt.b32[.mode] d, a, b, c: bytes of b:a picked by the selector c (a nibble per byte, or a fixed mode)."""
    if len(ins.parts) == 2:
        permute = _prmt_generic
    elif len(ins.parts) == 3 and ins.parts[2] in _PRMT_MODES:
        permute = _prmt_fixed(ins.parts[2])
    else:
        raise Unsupported("prmt mode")
    d = c.dst(ins.operands[0], "b32")
    a, b, s = (c.src(o, "b32") for o in ins.operands[1:4])

    def run(m):
        x = (np.asarray(b()).astype(np.uint64) << np.uint64(32)) | np.asarray(a()).astype(np.uint64)
        d(permute(x, np.asarray(s()).astype(np.uint64)).astype(np.uint32), m)
    return Op(PLAIN, run)


# --- comparisons ----------------------------------------------------------------------------------

def _compare(op, t):
    signed_or_float = is_signed(t) or t in ("f32", "f64", "f16")
    ordered = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
               "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}
    if t in ("f32", "f64", "f16"):
        if op in ("eq", "lt", "le", "gt", "ge"):
            return ordered[op]
        if op == "ne":
            return lambda x, y: (x != y) & ~np.isnan(x) & ~np.isnan(y)
        if op in ("equ", "neu", "ltu", "leu", "gtu", "geu"):
            base = ordered[op[:-1]]
            if op == "neu":
                return np.not_equal
            return lambda x, y: base(x, y) | np.isnan(x) | np.isnan(y)
        if op == "num":
            return lambda x, y: ~np.isnan(x) & ~np.isnan(y)
        if op == "nan":
            return lambda x, y: np.isnan(x) | np.isnan(y)
        raise Unsupported(f"setp.{op}.{t}")
    if op not in ordered:
        raise Unsupported(f"setp.{op}.{t}")
    if op in ("lo", "ls", "hi", "hs") and signed_or_float:
        raise Unsupported(f"setp.{op}.{t}")
    return ordered[op]


_BOOL = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}


@opcode("setp")
def build_setp(ins, c):
    t = c.type_of(ins)
    cmp_op = ins.parts[1]
    f = _compare(cmp_op, t)
    boolop = next((p for p in ins.parts[2:] if p in _BOOL), None)
    extra = [p for p in ins.parts[2:] if p not in _BOOL and p not in TYPE_BITS and p != "ftz"]
    if extra:
        raise Unsupported("modifier " + ", ".join(extra))
    dest = ins.operands[0]
    p = c.dst(dest, "pred")
    q = c.dst(dest.pair, "pred") if dest.pair is not None else None
    a, b = c.src(ins.operands[1], t), c.src(ins.operands[2], t)
    if "ftz" in ins.parts and t == "f32":
        a0, b0 = a, b
        a, b = (lambda: ftz32(a0())), (lambda: ftz32(b0()))
    cpred = c.src(ins.operands[3], "pred") if boolop else None
    combine = _BOOL[boolop] if boolop else None

    def run(m):
        r = f(a(), b())
        if combine is not None:
            cv = cpred()
            p(combine(r, cv), m)
            if q is not None:
                q(combine(~r, cv), m)
        else:
            p(r, m)
            if q is not None:
                q(~r, m)
    return Op(PLAIN, run)


@opcode("selp")
def build_selp(ins, c):
    t = c.type_of(ins)
    d = c.dst(ins.operands[0], t)
    a, b = c.src(ins.operands[1], t), c.src(ins.operands[2], t)
    cond = c.src(ins.operands[3], "pred")

    def run(m):
        d(np.where(cond(), a(), b()), m)
    return Op(PLAIN, run)


@opcode("lop3", family="int")
def build_lop3(ins, c):
    """lop3.b32 d, a, b, c, lut: any function of three inputs, bit by bit (lut bit (a << 2 | b << 1 | c))."""
    d = c.dst(ins.operands[0], "b32")
    a, b, z = (c.src(o, "b32") for o in ins.operands[1:4])
    lut_op = ins.operands[4]
    if lut_op.kind != "imm":
        raise Unsupported("lop3 with a register table")
    lut = lut_op.value & 0xFF

    def run(m):
        x, y, w = (np.asarray(g()).astype(np.uint32) for g in (a, b, z))
        r = np.zeros(np.broadcast(x, y, w).shape, dtype=np.uint32)
        for k in range(8):
            if lut >> k & 1:
                r |= (x if k & 4 else ~x) & (y if k & 2 else ~y) & (w if k & 1 else ~w)
        d(r, m)
    return Op(PLAIN, run)


@opcode("shf", family="int")
def build_shf(ins, c):
    """Funnel shifts: shf.{l,r}.{wrap,clamp}.b32 d, a, b, c over the 64 bits b:a."""
    parts = ins.parts[1:]
    if len(parts) != 3 or parts[0] not in ("l", "r") or parts[1] not in ("wrap", "clamp") or parts[2] != "b32":
        raise Unsupported("shf form")
    d = c.dst(ins.operands[0], "b32")
    a, b, n_ = (c.src(o, "u32") for o in ins.operands[1:4])
    left, wrap = parts[0] == "l", parts[1] == "wrap"

    def run(m):
        x = (np.asarray(b()).astype(np.uint64) << np.uint64(32)) | np.asarray(a()).astype(np.uint64)
        n = np.asarray(n_()).astype(np.uint64)
        n = n & np.uint64(31) if wrap else np.minimum(n, np.uint64(32))
        if left:
            r = (x << n) >> np.uint64(32)
        else:
            r = x >> n
        d((r & np.uint64(0xFFFFFFFF)).astype(np.uint32), m)
    return Op(PLAIN, run)


@opcode("bfind", family="int")
def build_bfind(ins, c):
    """bfind[.shiftamt].{u32,s32,u64,s64}: the position of the most significant non-sign bit (all ones if none)."""
    t = c.type_of(ins, ("u32", "s32", "u64", "s64"))
    bits = TYPE_BITS[t]
    shiftamt = "shiftamt" in ins.parts
    d = c.dst(ins.operands[0], "u32")
    a = c.src(ins.operands[1], t)

    def run(m):
        x = np.asarray(a())
        if is_signed(t):
            x = np.where(x < 0, ~x, x)
        u = x.astype(np.int64).view(np.uint64) if bits == 64 or is_signed(t) else x.astype(np.uint64)
        u = u & np.uint64((1 << bits) - 1)
        v = u.copy()
        for sh in (1, 2, 4, 8, 16, 32):
            v = v | (v >> np.uint64(sh))
        pos = np.bitwise_count(v).astype(np.int64) - 1
        if shiftamt:
            pos = np.where(pos >= 0, bits - 1 - pos, pos)
        d(np.where(pos < 0, np.uint32(0xFFFFFFFF), pos.astype(np.uint32)), m)
    return Op(PLAIN, run)


@opcode("slct")
def build_slct(ins, c):
    """slct.dtype.{s32,f32} d, a, b, c: a where c >= 0, else b."""
    types = c.types_of(ins)
    if len(types) != 2 or types[1] not in ("s32", "f32"):
        raise Unsupported("slct form")
    t, ct = types
    d = c.dst(ins.operands[0], t)
    a, b = c.src(ins.operands[1], t), c.src(ins.operands[2], t)
    z = c.src(ins.operands[3], ct)
    return Op(PLAIN, lambda m: d(np.where(np.asarray(z()) >= 0, a(), b()), m))


@opcode("sad", family="int")
def build_sad(ins, c):
    """sad.type d, a, b, c: |a - b| + c."""
    t = c.type_of(ins, _INT)
    d = c.dst(ins.operands[0], t)
    a, b, z = (c.src(o, t) for o in ins.operands[1:4])
    dt = DTYPE[t]

    def run(m):
        x, y = np.asarray(a()), np.asarray(b())
        diff = np.where(x > y, np.subtract(x, y, dtype=dt), np.subtract(y, x, dtype=dt))
        d(np.add(diff, z(), dtype=dt), m)
    return Op(PLAIN, run)
