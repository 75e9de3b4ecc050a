"""Half-precision arithmetic: add sub mul fma neg abs min max on .f16, .f16x2, .bf16 and .bf16x2 (.rn, .ftz,
.sat, .relu, .NaN) and ex2.approx on .f16 / .f16x2.

Values are raw 16-bit words (two per register for the x2 types, the first operand element in the low half).  An
operation decodes them to float64 (exact), computes exactly there (a product of two halves is exact, a sum is
rounded to odd, :func:`rounding.odd_sum`), and rounds once to the format (:func:`rounding.round_to_format`).  NaN
results are the GPU's canonical 0x7fff, for neg and abs too (measured on the H200: golden data).
``ex2.approx.f16`` follows the H200's rounding (:func:`_ex2_f16`).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import rounding as rnd
from .errors import Unsupported
from .ops_float import _minmax
from .program import PLAIN, Op, opcode

HALF_TYPES = ("f16", "f16x2", "bf16", "bf16x2")


@dataclasses.dataclass(frozen=True)
class Half:
    """How one 16-bit element type is decoded and encoded."""

    name: str
    format: rnd.Format
    decode: object  # raw bits (uint16) -> float64
    encode: object  # encode(float64 exact or rounded to odd, mode) -> raw bits (uint16), NaN canonical


F16 = Half("f16", rnd.F16, rnd.f16_bits_to_f64, rnd.f16_bits)
BF16 = Half("bf16", rnd.BF16, lambda b: rnd.bf16_bits_to_f32(b).astype(np.float64), rnd.bf16_bits)
ELEMENTS = {"f16": F16, "bf16": BF16}


def _form(ins, c, allowed):
    """The type (one of HALF_TYPES), its element and whether it is packed (x2); unknown modifiers refuse."""
    t = c.type_of(ins, HALF_TYPES)
    mods = set(ins.parts[1:]) - {t}
    unknown = mods - set(allowed)
    if unknown:
        raise Unsupported("modifier " + ", ".join("." + u for u in sorted(unknown)))
    return t, ELEMENTS[t.removesuffix("x2")], t.endswith("x2"), mods


def unpack(words, packed: bool):
    """Lane words -> the 16-bit elements, shape (2, lanes) for x2 (low half first), (1, lanes) otherwise."""
    w = np.atleast_1d(np.asarray(words))
    if not packed:
        return w.astype(np.uint16)[None, :]
    w = w.astype(np.uint32)
    return np.stack([w & np.uint32(0xFFFF), w >> np.uint32(16)]).astype(np.uint16)


def pack(halves, packed: bool):
    """The inverse of :func:`unpack`."""
    if not packed:
        return halves[0]
    return halves[0].astype(np.uint32) | (halves[1].astype(np.uint32) << np.uint32(16))


def _flush(v, element: Half):
    """Subnormal values (float64 of the element type) to a zero of the same sign."""
    tiny = (v != 0) & (np.abs(v) < element.format.smallest_normal)
    return np.where(tiny, np.copysign(0.0, v), v)


def _finish(mods, element: Half):
    """Post-processing of a rounded float64 result: flush (.ftz), clamp (.sat to [0, 1], NaN and -0 to +0;
    .relu: negative to +0, NaN stays)."""
    steps = []
    if "ftz" in mods:
        steps.append(lambda v: _flush(v, element))
    if "sat" in mods:
        steps.append(rnd.saturate)
    if "relu" in mods:
        steps.append(rnd.relu)

    def finish(v):
        for step in steps:
            v = step(v)
        return v
    return finish


def elementwise(t: str, compute, mods=frozenset()):
    """A function of raw words of type ``t`` (one of HALF_TYPES) to the raw words of the result: decode (exact;
    ftz-flushed inputs where .ftz), ``compute`` on float64 (exact or rounded to odd), round once to nearest even,
    post-process (:func:`_finish`), encode."""
    element, packed = ELEMENTS[t.removesuffix("x2")], t.endswith("x2")
    inputs = (lambda v: _flush(v, element)) if "ftz" in mods else (lambda v: v)
    finish = _finish(mods, element)

    def apply(*words):
        values = np.broadcast_arrays(*(inputs(element.decode(unpack(w, packed))) for w in words))
        rounded = rnd.round_to_format(compute(*values), element.format, "rn")
        return pack(element.encode(finish(rounded)), packed)
    return apply


def add_words(x, y, t: str):
    """x + y of raw words of a half type, rounded to nearest even (atom.add.noftz / red.add.noftz)."""
    return elementwise(t, rnd.odd_sum)(x, y)


def _operation(ins, c, n_sources, compute, allowed):
    """An elementwise half instruction: :func:`elementwise` over its ``n_sources`` operands."""
    t, _, packed, mods = _form(ins, c, allowed)
    word = "b32" if packed else "b16"
    d = c.dst(ins.operands[0], word)
    sources = [c.src(o, word) for o in ins.operands[1:1 + n_sources]]
    apply = elementwise(t, compute, mods)

    def run(m):
        d(apply(*(s() for s in sources)), m)
    return Op(PLAIN, run)


_ARITHMETIC = ("rn", "ftz", "sat")


@opcode("add", family="half")
def build_add(ins, c):
    return _operation(ins, c, 2, rnd.odd_sum, _ARITHMETIC)


@opcode("sub", family="half")
def build_sub(ins, c):
    return _operation(ins, c, 2, lambda x, y: rnd.odd_sum(x, -y), _ARITHMETIC)


@opcode("mul", family="half")
def build_mul(ins, c):
    return _operation(ins, c, 2, np.multiply, _ARITHMETIC)  # 2 x 11 (or 2 x 8) bits: exact in float64


@opcode("fma", family="half")
def build_fma(ins, c):
    return _operation(ins, c, 3, lambda x, y, z: rnd.odd_sum(x * y, z), _ARITHMETIC + ("relu",))


@opcode("neg", family="half")
def build_neg(ins, c):
    return _operation(ins, c, 1, np.negative, ("ftz",))


@opcode("abs", family="half")
def build_abs(ins, c):
    return _operation(ins, c, 1, np.abs, ("ftz",))


@opcode("min", "max", family="half")
def build_minmax(ins, c):
    return _operation(ins, c, 2, _minmax(ins.mnemonic == "min", "NaN" in ins.parts), ("ftz", "NaN"))


def _ex2_f16(x):
    """2**x as the H200's ex2.approx.f16 gives it (511 of the 512 golden elements bit-equal): a float32 result
    (float64 rounded to nearest) cut to f16 toward zero, except that past the largest f16 it is infinity."""
    e = np.exp2(x).astype(np.float32).astype(np.float64)
    cut = rnd.round_to_format(e, rnd.F16, "rz")
    return np.where(np.abs(e) > rnd.F16.largest, np.copysign(np.inf, e), cut)


@opcode("ex2", family="half")
def build_ex2(ins, c):
    """ex2.approx.f16 / .f16x2 (:func:`_ex2_f16`; the bf16 forms are not measured, so not emulated)."""
    if "approx" not in ins.parts or c.type_of(ins) not in ("f16", "f16x2"):
        raise Unsupported("ex2 form")
    return _operation(ins, c, 1, _ex2_f16, ("approx",))
