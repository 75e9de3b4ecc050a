"""Tensor-core instructions: mma.sync.aligned (m16n8k8 and m16n8k16 .row.col with f16/bf16 inputs, m16n8k8 with
tf32, f32 or f16 accumulation; m8n8k16 .row.col s8/u8 -> s32) and ldmatrix.sync.aligned.m8n8 (.x1 .x2 .x4,
.trans, .b16).

Both are warp-collective: a warp executes one when all its lanes have arrived (the machine's rule for collectives,
with the full mask); a warp that executes it with lanes missing (exited, or a block that is not whole warps) is a
``partial_warp_collective`` finding, as on the GPU the result is undefined there.

Fragments follow the PTX ISA ("Matrix fragments for mma.m16n8k8" etc.): lane ``l`` of the warp has group
``l >> 2`` and thread-in-group ``l & 3``; :func:`fragment` gives, for every register and element of an operand,
the (row, column) each lane holds.

Accumulation (measured on the H200, golden data: every element of the five f32-accumulating forms bit-equal):
products are exact; the exponent of each product is taken as the sum of its operands' exponents; every product
and C are truncated toward zero to multiples of 2**(emax - 25), emax the largest of those exponents and C's; the
truncated terms are added exactly and the sum is truncated (toward zero) to f32 (:func:`accumulate_f32`).  f16
accumulation is the exact sum rounded once to nearest even (all golden elements bit-equal).  Integer: exact,
wrapping modulo 2**32 (.satfinite clamps).
"""
from __future__ import annotations

import numpy as np

from . import rounding as rnd
from .errors import Unsupported
from .ops_memory import _address, _setter_at
from .program import COLLECTIVE, Op, opcode

FULL_WARP = np.uint32(0xFFFFFFFF)
_LANE = np.arange(32)
_GROUP, _THREAD = _LANE >> 2, _LANE & 3

#: Truncation point of the tensor cores' f32 accumulation: terms keep the bits down to 2**(emax - ALIGN_BITS).
ALIGN_BITS = 25


# --- fragments -----------------------------------------------------------------------------------

def _positions(regs: int, per_register: int, row, col) -> np.ndarray:
    """(regs, per_register, 32, 2) of (row, column): ``row(r, e)`` and ``col(r, e)`` give arrays over the lanes."""
    out = np.zeros((regs, per_register, 32, 2), dtype=np.int64)
    for r in range(regs):
        for e in range(per_register):
            out[r, e, :, 0] = row(r, e)
            out[r, e, :, 1] = col(r, e)
    return out


def fragment(operand: str, shape: str, etype: str) -> np.ndarray:
    """Where each lane's registers of an mma operand ("a", "b", "c") sit in its matrix (PTX ISA layouts)."""
    g, t = _GROUP, _THREAD
    k = int(shape.split("k")[1])
    if etype in ("f16", "bf16") and operand == "a":  # 16 x k, two elements per register
        return _positions(k // 4, 2, lambda r, e: g + 8 * (r % 2), lambda r, e: 2 * t + e + 8 * (r // 2))
    if etype in ("f16", "bf16") and operand == "b":  # k x 8
        return _positions(k // 8, 2, lambda r, e: 2 * t + e + 8 * r, lambda r, e: g)
    if etype == "tf32" and operand == "a":
        return _positions(4, 1, lambda r, e: g + 8 * (r % 2), lambda r, e: t + 4 * (r // 2))
    if etype == "tf32" and operand == "b":
        return _positions(2, 1, lambda r, e: t + 4 * r, lambda r, e: g)
    if etype in ("s8", "u8") and operand == "a":  # 8 x 16, four elements per register
        return _positions(1, 4, lambda r, e: g, lambda r, e: 4 * t + e)
    if etype in ("s8", "u8") and operand == "b":
        return _positions(1, 4, lambda r, e: 4 * t + e, lambda r, e: g)
    if etype == "f32" and shape.startswith("m16"):  # C and D, 16 x 8
        return _positions(4, 1, lambda r, e: g + 8 * (r // 2), lambda r, e: 2 * t + r % 2)
    if etype == "f16":
        return _positions(2, 2, lambda r, e: g + 8 * r, lambda r, e: 2 * t + e)
    if etype == "s32":  # 8 x 8
        return _positions(2, 1, lambda r, e: g, lambda r, e: 2 * t + r)
    raise Unsupported(f"mma fragment of .{etype}")


#: The forms implemented: shape -> {(A/B type, C/D type)}.
_SHAPES = {
    "m16n8k8": {("f16", "f32"), ("f16", "f16"), ("bf16", "f32"), ("tf32", "f32")},
    "m16n8k16": {("f16", "f32"), ("f16", "f16"), ("bf16", "f32")},
    "m8n8k16": {("s8", "s32"), ("u8", "s32")},
}
_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "s8": 8, "u8": 8, "f32": 32, "s32": 32}


def _decode(bits: np.ndarray, etype: str) -> np.ndarray:
    """Element bits -> float64 (int64 for the integer types); tf32 ignores the low 13 bits (as the H200 does)."""
    if etype == "f16":
        return rnd.f16_bits_to_f64(bits.astype(np.uint16))
    if etype == "bf16":
        return rnd.bf16_bits_to_f32(bits.astype(np.uint16)).astype(np.float64)
    if etype == "tf32":
        return (bits.astype(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if etype == "f32":
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    if etype == "s8":
        return bits.astype(np.uint8).view(np.int8).astype(np.int64)
    if etype == "u8":
        return bits.astype(np.int64)
    return bits.astype(np.uint32).view(np.int32).astype(np.int64)  # s32


def _encode(values: np.ndarray, etype: str) -> np.ndarray:
    """Result elements -> raw bits: f32 (NaN canonical), f16 (already rounded), s32."""
    if etype == "f32":
        return rnd.canon32(values.astype(np.float32)).view(np.uint32)
    if etype == "f16":
        return rnd.f16_bits(values).astype(np.uint32)
    return values.astype(np.int64).astype(np.uint32)


def gather(words: list, layout: np.ndarray, rows: int, cols: int, etype: str) -> np.ndarray:
    """The registers' words of each warp, ``words[r]`` (warps, 32), into matrices (warps, rows, cols).

    Every element of every register is decoded at once and put in place by one assignment (a fragment's
    positions are all distinct: the same matrices as element by element)."""
    bits = _BITS[etype]
    regs, per = layout.shape[:2]
    w = np.stack(words, axis=1).astype(np.uint64)  # (warps, regs, 32)
    if per == 1:
        el = w & np.uint64((1 << bits) - 1) if bits < 32 else w
        el = el[:, :, None, :]
    else:
        el = (w[:, :, None, :] >> _shifts(bits, per)) & np.uint64((1 << bits) - 1)
    v = _decode(el, etype)  # (warps, regs, per, 32)
    out = np.zeros((w.shape[0], rows, cols), dtype=v.dtype)
    out[:, layout[..., 0].reshape(-1), layout[..., 1].reshape(-1)] = v.reshape(w.shape[0], -1)
    return out


def _shifts(bits: int, per: int) -> np.ndarray:
    return (np.arange(per, dtype=np.uint64) * np.uint64(bits))[None, None, :, None]


def scatter(matrix: np.ndarray, layout: np.ndarray, etype: str) -> list:
    """The inverse of :func:`gather`: per register, its words (warps, 32)."""
    bits = _BITS[etype]
    regs, per = layout.shape[:2]
    v = _encode(matrix[:, layout[..., 0], layout[..., 1]], etype).astype(np.uint64)  # (warps, regs, per, 32)
    v = (v & np.uint64((1 << bits) - 1)) << _shifts(bits, per)
    w = v[:, :, 0] if per == 1 else np.bitwise_or.reduce(v, axis=2)
    w = w.astype(np.uint32)
    return [w[:, r] for r in range(regs)]


# --- accumulation ----------------------------------------------------------------------------------

def _exponents(x: np.ndarray) -> np.ndarray:
    """floor(log2|x|) of finite non-zero values, -inf elsewhere."""
    a = np.abs(x)
    usable = (a > 0) & np.isfinite(a)
    return np.where(usable, np.frexp(np.where(usable, a, 1.0))[1] - 1.0, -np.inf)


def _exponents_of_finite(x: np.ndarray) -> np.ndarray:
    """:func:`_exponents` of finite float64 values that are zero or normal as float64 (every f16, bf16, tf32 and f32
    value is, subnormals included): the exponent field, read directly (twice as fast as frexp)."""
    field = ((x.view(np.uint64) >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.float64)
    return np.where(field > 0, field - 1023.0, -np.inf)


def _products(A, B):
    """(warps, M, N, K) exact products, and each product's exponent taken as the sum of its operands'."""
    products = A[:, :, None, :] * np.swapaxes(B, 1, 2)[:, None, :, :]
    exponents = _exponents(A)[:, :, None, :] + np.swapaxes(_exponents(B), 1, 2)[:, None, :, :]
    return products, np.where(products != 0, exponents, -np.inf)


def accumulate_f32(A, B, C):
    """D = A B + C as the H200's tensor cores compute it in f32 (module docstring; inputs float64, exact).

    The products are laid out k first, so that the maximum and the sum over k are elementwise NumPy calls; the
    terms are multiples of the quantum whose sum is exact, so the order of the sum does not change a bit.  Where
    a product or C is not finite the sum is IEEE's, as :func:`_accumulate_f32_in_order` computes it."""
    if not (np.isfinite(A).all() and np.isfinite(B).all() and np.isfinite(C).all()):
        return _accumulate_f32_in_order(A, B, C)
    # Finite f16/bf16/tf32 operands: every product is finite, and zero only where an operand is (whose exponent,
    # -inf, makes the sum of exponents -inf, as the where(products != 0, ...) of the ordered sum does).
    Ak = A.transpose(2, 0, 1)[:, :, :, None]  # (K, warps, M, 1)
    Bk = B.transpose(1, 0, 2)[:, :, None, :]  # (K, warps, 1, N)
    products = Ak * Bk  # (K, warps, M, N)
    exponents = _exponents_of_finite(Ak) + _exponents_of_finite(Bk)
    emax = np.maximum(exponents.max(axis=0), _exponents_of_finite(C))
    quantum = np.ldexp(1.0, np.where(np.isfinite(emax), emax, 0.0).astype(np.int64) - ALIGN_BITS)
    terms = np.divide(products, quantum, out=products)  # in place: trunc(products / quantum) * quantum
    np.trunc(terms, out=terms)
    np.multiply(terms, quantum, out=terms)
    total = terms.sum(axis=0) + np.trunc(C / quantum) * quantum  # multiples of the quantum: exact
    return _rz_f32(total)


_ABS64 = np.uint64(0x7FFFFFFFFFFFFFFF)
_NORMAL32 = np.uint64(np.array(2.0 ** -126).view(np.uint64))  # |x| bits from here ...
_NORMAL32_SPAN = np.uint64(np.array(2.0 ** 128).view(np.uint64)) - _NORMAL32  # ... to below 2**128
_KEEP24 = np.uint64(0xFFFFFFFFE0000000)  # sign, exponent and the 23 mantissa bits float32 keeps


def _rz_f32(x):
    """rounding.round_to_format(x, F32, "rz") of float64 ``x``: where every element is zero or in float32's normal
    range (below 2**128) that is cutting the float64 mantissa to float32's 24 bits; otherwise round_to_format."""
    u = x.view(np.uint64)
    w = u & _ABS64
    if rnd.nnz((w - _NORMAL32) < _NORMAL32_SPAN) + rnd.nnz(w == 0) != x.size:
        return rnd.round_to_format(x, rnd.F32, "rz")
    return (u & _KEEP24).view(np.float64)


def _accumulate_f32_in_order(A, B, C):
    """:func:`accumulate_f32` with the products laid out k last and summed along k (infinities and NaN: as IEEE
    sums them, in NumPy's order)."""
    products, exponents = _products(A, B)
    emax = np.maximum(np.max(exponents, axis=-1), _exponents(C))
    quantum = np.ldexp(1.0, np.where(np.isfinite(emax), emax, 0.0).astype(np.int64) - ALIGN_BITS)
    terms = np.trunc(products / quantum[..., None]) * quantum[..., None]
    total = np.sum(terms, axis=-1) + np.trunc(C / quantum) * quantum  # multiples of the quantum: exact
    special = ~(np.isfinite(products).all(axis=-1) & np.isfinite(C))
    if special.any():  # infinities and NaN: as IEEE sums them
        total = np.where(special, np.sum(products, axis=-1) + C, total)
    return rnd.round_to_format(total, rnd.F32, "rz")


#: Every f16 product and f16 value is a multiple of 2**-48 below 2**32: scaled by 2**48 it is an integer, split
#: into two int64 halves at 2**40 the sums are exact.
_F16_SCALE, _F16_SPLIT = 2.0 ** 48, 2.0 ** 40


def accumulate_f16(A, B, C):
    """D = A B + C of f16 values, the exact sum rounded once to f16 (nearest even)."""
    products = A[:, :, None, :] * np.swapaxes(B, 1, 2)[:, None, :, :]
    terms = np.concatenate([products, C[..., None]], axis=-1)
    finite = np.isfinite(terms).all(axis=-1)
    scaled = np.where(np.isfinite(terms), terms, 0.0) * _F16_SCALE
    high = np.floor(scaled / _F16_SPLIT)
    low = (scaled - high * _F16_SPLIT).astype(np.int64).sum(axis=-1)
    high = high.astype(np.int64).sum(axis=-1) + (low >> 40)
    low = low & ((1 << 40) - 1)
    s, e = rnd.two_sum(high.astype(np.float64) * _F16_SPLIT, low.astype(np.float64))
    exact = rnd.round_to_odd(s, e) / _F16_SCALE
    return rnd.round_to_format(np.where(finite, exact, np.sum(terms, axis=-1)), rnd.F16, "rn")


def accumulate_int(A, B, C, saturate: bool):
    total = np.einsum("wmk,wkn->wmn", A, B) + C
    if saturate:
        return np.clip(total, -2 ** 31, 2 ** 31 - 1)
    return (total + 2 ** 31) % 2 ** 32 - 2 ** 31


# --- the instructions --------------------------------------------------------------------------------

def _registers(c, operand, count: int, getter):
    items = operand.items if operand.kind == "vec" else (operand,)
    if len(items) != count:
        raise Unsupported(f"{len(items)} registers where the fragment has {count}")
    return [getter(item) for item in items]


def _whole_warps(machine, mask, ins, what: str):
    """The warps of ``mask`` (their indices); a warp with lanes missing is a finding (the GPU leaves it undefined)."""
    present = machine.warp_bits(mask)
    warps = np.flatnonzero(present)
    partial = warps[present[warps] != np.uint64(0xFFFFFFFF)]
    if len(partial):
        w = int(partial[0])
        here = bin(int(present[w])).count("1")
        lane = w * 32 + int(np.flatnonzero(mask[w * 32:(w + 1) * 32])[0])
        machine.fault("partial_warp_collective",
                      f"{what} выполнили только {here} из 32 потоков варпа: эта операция требует весь варп "
                      "(остальные потоки вышли, пошли по другой ветке или не существуют — блок не кратен 32); "
                      "на GPU результат не определён", lane, ins, len(partial))
    return warps


def _per_warp(getter, machine, warps):
    """A register's lane values as (warps, 32) words."""
    v = np.asarray(getter())
    if v.ndim == 0:
        v = np.full(machine.L, v)
    return v.reshape(-1, 32)[warps]


@opcode("mma")
def build_mma(ins, c):
    parts = ins.parts[1:]
    if len(parts) < 8 or parts[:2] != ("sync", "aligned") or parts[3:5] != ("row", "col"):
        raise Unsupported("mma form")
    shape, rest = parts[2], parts[5:]
    saturate = "satfinite" in rest
    types = [p for p in rest if p != "satfinite"]
    if len(types) != 4:
        raise Unsupported("mma types")
    dtype, atype, btype, ctype = types
    if (atype != btype and {atype, btype} != {"s8", "u8"}) or dtype != ctype \
            or (atype, dtype) not in _SHAPES.get(shape, ()) or (saturate and dtype != "s32"):
        raise Unsupported("mma." + ".".join(parts))
    M, N, K = (int(x) for x in shape[1:].replace("n", " ").replace("k", " ").split())
    layouts = {"a": fragment("a", shape, atype), "b": fragment("b", shape, btype), "c": fragment("c", shape, ctype)}
    d_op, a_op, b_op, c_op = ins.operands
    sets = _registers(c, d_op, layouts["c"].shape[0], lambda o: c.dst(o, "b32"))
    a_regs = _registers(c, a_op, layouts["a"].shape[0], lambda o: c.src(o, "b32"))
    b_regs = _registers(c, b_op, layouts["b"].shape[0], lambda o: c.src(o, "b32"))
    c_regs = _registers(c, c_op, layouts["c"].shape[0], lambda o: c.src(o, "b32"))
    machine = c.m

    def run(mask):
        warps = _whole_warps(machine, mask, ins, "mma.sync (тензорное умножение)")
        A = gather([_per_warp(g, machine, warps) for g in a_regs], layouts["a"], M, K, atype)
        B = gather([_per_warp(g, machine, warps) for g in b_regs], layouts["b"], K, N, btype)
        C = gather([_per_warp(g, machine, warps) for g in c_regs], layouts["c"], M, N, ctype)
        if dtype == "s32":
            D = accumulate_int(A, B, C, saturate)
        elif dtype == "f16":
            D = accumulate_f16(A, B, C)
        else:
            D = accumulate_f32(A, B, C)
        lanes = (warps[:, None] * 32 + _LANE).reshape(-1)
        for s, words in zip(sets, scatter(D, layouts["c"], dtype)):
            full = np.zeros(machine.L, dtype=np.uint32)
            full[lanes] = words.reshape(-1)
            s(full, mask)
    return Op(COLLECTIVE, run, ready=lambda part: machine.ready(part, FULL_WARP), member=lambda: FULL_WARP)


@opcode("ldmatrix")
def build_ldmatrix(ins, c):
    """ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans][.shared{::cta}].b16: lanes 8i..8i+7 give the row addresses
    of matrix i (16 bytes each, read as those lanes' shared loads: bounds, alignment, races, uninitialised bytes);
    register i of lane l gets row l/4, columns 2(l%4) and 2(l%4)+1 of matrix i (of its transpose with .trans)."""
    parts = ins.parts[1:]
    known = {"sync", "aligned", "m8n8", "x1", "x2", "x4", "trans", "shared", "shared::cta", "b16"}
    if set(parts) - known or not {"sync", "aligned", "m8n8", "b16"} <= set(parts):
        raise Unsupported("ldmatrix." + ".".join(parts))
    count = next((int(p[1]) for p in parts if p in ("x1", "x2", "x4")), None)
    if count is None:
        raise Unsupported("ldmatrix without .x1/.x2/.x4")
    trans = "trans" in parts
    space = "shared" if {"shared", "shared::cta"} & set(parts) else "generic"
    sets = _registers(c, ins.operands[0], count, lambda o: _setter_at(c, o, "b32"))
    address = _address(c, ins.operands[1])
    machine = c.m
    t = _LANE & 3
    row, col = (2 * t, _LANE >> 2) if trans else (_LANE >> 2, 2 * t)  # of the low element; the high one is next

    def run(mask):
        warps = _whole_warps(machine, mask, ins, "ldmatrix")
        sources = (warps[:, None] * 32 + np.arange(8 * count)).reshape(-1)
        here = mask[sources]  # a row whose lane is missing stays 0 (the finding above says so)
        a = np.asarray(address())
        a = a[sources[here]] if a.ndim else np.full(int(here.sum()), a)
        rows = np.zeros((len(sources), 8), dtype=np.uint16)
        if here.any():
            rows[here] = machine.access(space, sources[here], a, 2, 8, ins).T  # (rows, 8 elements)
        rows = rows.reshape(len(warps), count, 8, 8)  # warp, matrix, row, column
        lanes = (warps[:, None] * 32 + _LANE).reshape(-1)
        for i, s in enumerate(sets):
            m = rows[:, i]
            if trans:
                low, high = m[:, row, col], m[:, row + 1, col]
            else:
                low, high = m[:, row, col], m[:, row, col + 1]
            s((low.astype(np.uint32) | (high.astype(np.uint32) << np.uint32(16))).reshape(-1), lanes)
    return Op(COLLECTIVE, run, ready=lambda part: machine.ready(part, FULL_WARP), member=lambda: FULL_WARP)
