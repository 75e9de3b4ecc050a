"""Golden data for the PTX emulator (issue 26, "Proof against the H200"): one micro-kernel per opcode form.

    python benchmarks/emulator_golden.py --dry-run            # no GPU: build, compile (NVRTC + ptxas), write inputs and PTX
    python3 benchmarks/emulator_golden.py                     # on a GPU: writes tests/golden/emulator/
    python3 benchmarks/emulator_golden.py --only 'f32.*' --out /tmp/g --time-limit-s 120
    python3 benchmarks/emulator_golden.py --only wgmma --out /tmp/w   # on a GPU: some forms, then here:
    python benchmarks/emulator_golden.py --merge-from /tmp/w          # into tests/golden/emulator

Every form is a tiny CUDA C kernel whose inline PTX ``asm volatile`` applies exactly one instruction (or, for the
warp, matrix, atomic and async-copy forms, one instruction with the loads and stores it needs).  Elementwise forms:
thread i reads a[i], b[i], ... as raw 16-, 32- or 64-bit words and writes out[i].  Inputs per form: the edge cases of
its operand types (±0, ±inf, quiet and signalling NaNs with payloads, the smallest and largest subnormals and
normals, values at rounding ties, INT_MIN/-1, shift counts 0/31/32/33...) crossed with each other, then random bits
and random normal-sized values.

On a GPU each form runs twice: natively (CuPy's RawModule, a cubin for the device, sm_90 on an H200) and from the
PTX of a virtual architecture (compute_75; compute_80 for forms that need sm_80; compute_90a for wgmma, which runs
from its PTX only) JIT-compiled by the driver: that
PTX, made by this machine's NVRTC through :func:`autograder.gpu.nvrtc.ptx`, is what the manifest stores and what the
emulator runs in ``tests/test_emulator_golden.py``.  Both outputs are stored, and the table printed at the end gives
per form the rate of elements where they are bit-equal.

Output (``--out``, default ``tests/golden/emulator``): ``manifest.json`` (per form: name, family, CUDA C source, PTX,
kernel name, launch shape, argument layout, output types, comparison rule, results; and the device, date, CuPy
version and command of the run) and ``data.npz`` (compressed; key ``<form>__in__<arg>`` the initial contents of
every input buffer, ``<form>__native__<arg>`` and ``<form>__ptx__<arg>`` the final contents of every output buffer;
a native buffer bit-equal to the PTX run's is stored once, as ``__ptx__``, and listed in the form's
``results.native_same_as_ptx``).
``--dry-run`` writes the same files without outputs (to a temporary folder unless ``--out`` is given).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import fnmatch
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_OUT = ROOT / "tests" / "golden" / "emulator"
N = 512  # elements of an elementwise form
BLOCK = 128
SEED = 26

# --- operand types ----------------------------------------------------------------------------
# type: (storage dtype, C storage type, C register type, inline-asm constraint, load expression, store expression)
TYPES = {
    "f32": ("uint32", "unsigned int", "float", "f", "__uint_as_float({})", "__float_as_uint({})"),
    "f64": ("uint64", "unsigned long long", "double", "d", "__longlong_as_double((long long)({}))",
            "(unsigned long long)__double_as_longlong({})"),
    "b32": ("uint32", "unsigned int", "unsigned int", "r", "{}", "{}"),
    "b64": ("uint64", "unsigned long long", "unsigned long long", "l", "{}", "{}"),
    "b16": ("uint16", "unsigned short", "unsigned short", "h", "{}", "{}"),
    "pred": ("uint32", "unsigned int", "unsigned int", "r", "{}", "{}"),
}
#: How an output's bits are interpreted by the comparison (test_emulator_golden.py): integer kinds are compared
#: bit for bit, float kinds with the NaN rule, *x2 kinds as two halves.
VALUE_KINDS = {"u32", "s32", "u64", "s64", "u16", "pred", "f32", "f64", "f16", "bf16", "f16x2", "bf16x2"}


def _storage(kind: str) -> str:
    return {"u32": "b32", "u64": "b64", "u16": "b16", "pred": "pred", "f32": "f32", "f64": "f64", "f16": "b16",
            "bf16": "b16", "f16x2": "b32", "bf16x2": "b32", "s32": "b32", "s64": "b64"}[kind]


@dataclasses.dataclass
class Form:
    name: str
    family: str
    kernel: str
    source: str
    arch: str  # the PTX's virtual architecture: compute_75 or compute_80
    grid: tuple
    block: tuple
    args: list  # [{"name", "role": in|out|inout|scalar, "dtype", "count"} | {"name", "role": "scalar", "type", "value"}]
    inputs: dict  # arg name -> np.ndarray (initial contents of in and inout buffers)
    outputs: dict  # arg name -> value kind (of out and inout buffers)
    compare: str = "exact"  # exact | approx
    tolerance: dict = dataclasses.field(default_factory=dict)
    note: str = ""
    shared_bytes: int = 0  # dynamic shared memory
    ptx: str | None = None  # the PTX that ran (or, in a dry run, compiled)

    @property
    def elements(self) -> int:
        return max(int(np.prod(self.grid)) * int(np.prod(self.block)), 1)


# --- inputs -------------------------------------------------------------------------------------
F32_EDGES = [0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
             0x7FC12345, 0x7F800001, 0xFFA00000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000,
             0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800001, 0x3F7FFFFF, 0x3F000000, 0x3FC00000, 0x40200000,
             0xBFC00000, 0xC0200000, 0x40490FDB, 0x3DCCCCCD, 0x4B000000, 0x4B000001, 0x4EFFFFFF, 0x4F000000,
             0xCF000000, 0xCF000001, 0x4F800000, 0x5F000000, 0xDF000000, 0x33800000, 0x34000000, 0x7E800000,
             0x00400000, 0x3EFFFFFF, 0x3F000001, 0x40400000, 0x42FE0000, 0xC2FC0000, 0x43000000, 0xC3160000]
F32_CROSS = [0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001,
             0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800001, 0x33800000, 0x3F000000]
F64_EDGES = [0x0, 0x8000000000000000, 0x3FF0000000000000, 0xBFF0000000000000, 0x7FF0000000000000,
             0xFFF0000000000000, 0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000012345, 0x7FF0000000000001,
             0xFFF4000000000000, 0x1, 0x8000000000000001, 0x000FFFFFFFFFFFFF, 0x0010000000000000,
             0x8010000000000000, 0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF, 0x3FF0000000000001, 0x3FEFFFFFFFFFFFFF,
             0x3FE0000000000000, 0x3FF8000000000000, 0x4004000000000000, 0xBFF8000000000000, 0x400921FB54442D18,
             0x3FB999999999999A, 0x4330000000000000, 0x41DFFFFFFFC00000, 0x41E0000000000000, 0xC1E0000000000000,
             0x43E0000000000000, 0xC3E0000000000000, 0x43F0000000000000, 0x3CA0000000000000, 0x47EFFFFFE0000000,
             0x47EFFFFFF0000000, 0x36A0000000000000, 0x3690000000000000, 0x380FFFFFF0000000, 0x41F0000000000000]
F64_CROSS = [0x0, 0x8000000000000000, 0x3FF0000000000000, 0xBFF0000000000000, 0x7FF0000000000000,
             0xFFF0000000000000, 0x7FF8000000000000, 0x7FF0000000000001, 0x1, 0x800FFFFFFFFFFFFF,
             0x0010000000000000, 0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF, 0x3FF0000000000001, 0x3CA0000000000000,
             0x3FE0000000000000]
F16_EDGES = [0x0000, 0x8000, 0x3C00, 0xBC00, 0x7C00, 0xFC00, 0x7E00, 0x7D00, 0xFE01, 0x0001, 0x8001, 0x03FF,
             0x0400, 0x7BFF, 0xFBFF, 0x3C01, 0x3BFF, 0x3800, 0x3E00, 0x4100, 0x1400, 0x4248, 0x5BFF, 0x2E66]
F16_CROSS = [0x0000, 0x8000, 0x3C00, 0xBC00, 0x7C00, 0xFC00, 0x7E00, 0x7D00, 0x0001, 0x03FF, 0x0400, 0x7BFF,
             0xFBFF, 0x3C01, 0x1400, 0x3800]
BF16_EDGES = [0x0000, 0x8000, 0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x7FC0, 0x7FA0, 0xFF81, 0x0001, 0x8001, 0x007F,
              0x0080, 0x7F7F, 0xFF7F, 0x3F81, 0x3F7F, 0x3F00, 0x3FC0, 0x4020, 0x3380, 0x4049, 0x7F00, 0x3DCD]
BF16_CROSS = [0x0000, 0x8000, 0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x7FC0, 0x7FA0, 0x0001, 0x007F, 0x0080, 0x7F7F,
              0xFF7F, 0x3F81, 0x3380, 0x3F00]
I32_EDGES = [0, 1, 2, 3, 0xFFFFFFFF, 0xFFFFFFFE, 0x80000000, 0x7FFFFFFF, 0x80000001, 0x7FFFFFFE, 0xFFFF, 0x10000,
             0xAAAAAAAA, 0x55555555, 0xFF, 0x100, 0x12345678, 0xFFFF8000, 0x7F, 0x80, 0xFFFFFF80, 0x8000, 0xF0F0F0F0,
             0x0000001F, 0x00000020, 0x00000021]
I32_CROSS = [0, 1, 2, 0xFFFFFFFF, 0xFFFFFFFE, 0x80000000, 0x7FFFFFFF, 0x80000001, 0xFFFF, 0x10000, 0xAAAAAAAA,
             0x12345678, 0x7F, 0xFFFFFF80, 0x1F, 0x21]
I64_EDGES = [0, 1, 2, 0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 0x8000000000000000, 0x7FFFFFFFFFFFFFFF,
             0x8000000000000001, 0xFFFFFFFF, 0x100000000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF80000000,
             0xAAAAAAAAAAAAAAAA, 0x5555555555555555, 0x123456789ABCDEF0, 0x3F, 0x40, 0x41, 0xFFFFFFFF00000000]
I64_CROSS = I64_EDGES[:16]
SHIFTS = [0, 1, 7, 8, 15, 16, 31, 32, 33, 63, 64, 65, 127, 255, 256, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]
EDGES = {"f32": (F32_EDGES, F32_CROSS), "f64": (F64_EDGES, F64_CROSS), "f16": (F16_EDGES, F16_CROSS),
         "bf16": (BF16_EDGES, BF16_CROSS), "u32": (I32_EDGES, I32_CROSS), "s32": (I32_EDGES, I32_CROSS),
         "u64": (I64_EDGES, I64_CROSS), "s64": (I64_EDGES, I64_CROSS)}
EDGES["f16x2"] = EDGES["f16"]
EDGES["bf16x2"] = EDGES["bf16"]
EDGES["pred"] = ([0, 1], [0, 1])
EDGES["u16"] = ([0, 1, 0xFFFF, 0x8000, 0x7FFF, 0xFF, 0x80, 0x7F], [0, 1, 0xFFFF, 0x8000, 0x7FFF, 0xFF, 0x80, 0x7F])


def _dtype(kind: str):
    return np.dtype(TYPES[_storage(kind)][0])


def random_values(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """n values of a kind: a third random bits, the rest normal-sized numbers (floats: short mantissas too, which
    make exact results and rounding ties common) or small and large integers."""
    dt = _dtype(kind)
    bits = rng.integers(0, 2 ** (8 * dt.itemsize), n, dtype=np.uint64 if dt.itemsize == 8 else np.int64).astype(dt)
    if kind == "pred":
        return rng.integers(0, 2, n).astype(dt)
    nice = np.empty(n, dt)
    if kind in ("f32", "f64", "f16", "bf16", "f16x2", "bf16x2"):
        exp = rng.integers(-12, 13, n).astype(np.float64)
        mant = rng.standard_normal(n)
        short = (rng.integers(2 ** 11, 2 ** 13, n) * rng.choice([-1, 1], n)).astype(np.float64) * 2.0 ** (exp - 12)
        values = np.where(rng.random(n) < 0.5, mant * 2.0 ** exp, short)
        if kind == "f32":
            nice = values.astype(np.float32).view(np.uint32)
        elif kind == "f64":
            values = np.where(rng.random(n) < 0.5, values, (rng.integers(2 ** 26, 2 ** 27, n) * rng.choice([-1, 1], n))
                              .astype(np.float64) * 2.0 ** (exp - 26))
            nice = values.view(np.uint64)
        elif kind in ("f16", "f16x2"):
            nice = (values / 256).astype(np.float16).view(np.uint16)
        else:
            nice = (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        if kind.endswith("x2"):
            lo = nice.astype(np.uint32)
            hi = np.roll(nice, 7).astype(np.uint32)
            nice = (lo | (hi << 16)).astype(np.uint32)
    else:
        small = rng.integers(-300, 300, n)
        big = rng.integers(-2 ** 31, 2 ** 31, n)
        nice = np.where(rng.random(n) < 0.5, small, big).astype(np.int64).astype(dt)
    return np.where(rng.random(n) < 1 / 3, bits, nice).astype(dt)


def _edge_words(kind: str, cross: bool) -> list:
    values = EDGES[kind][1 if cross else 0]
    if kind.endswith("x2"):  # pair the edges in both halves
        return [(v | (values[(i * 5 + 3) % len(values)] << 16)) for i, v in enumerate(values)]
    return values


def operands(kinds: list, n: int, rng: np.random.Generator, special: dict | None = None) -> list:
    """Inputs of an elementwise form: every edge case of each operand, the cross products of the short edge lists
    (one or two operands; with three, the third runs over its edges), then random values.  ``special`` maps an
    operand's index to a list of values used in place of its edges (shift counts, positions, selectors)."""
    special = special or {}
    cols = []
    k = len(kinds)
    lists = [special.get(i, _edge_words(kind, cross=k > 1)) for i, kind in enumerate(kinds)]
    if k == 1:
        head = [list(lists[0])]
    elif k == 2:
        a, b = np.meshgrid(np.arange(len(lists[0])), np.arange(len(lists[1])), indexing="ij")
        head = [[lists[0][i] for i in a.ravel()], [lists[1][j] for j in b.ravel()]]
    else:
        m = max(len(x) for x in lists) * 8
        head = [[lst[(i * (7 + 2 * j) + j) % len(lst)] for i in range(m)] for j, lst in enumerate(lists)]
    h = min(len(head[0]), n // 2)
    for i, kind in enumerate(kinds):
        dt = _dtype(kind)
        first = np.array([int(v) & (2 ** (8 * dt.itemsize) - 1) for v in head[i][:h]], dtype=dt)
        rest = random_values(kind, n - h, rng)
        if i in special:  # the rest of a special operand: mostly its special values, some random
            pick = np.array(special[i], dtype=np.uint64).astype(dt)[rng.integers(0, len(special[i]), n - h)]
            rest = np.where(rng.random(n - h) < 0.75, pick, rest).astype(dt)
        cols.append(np.concatenate([first, rest]))
    return cols


def ties(kind: str, n: int, rng: np.random.Generator) -> tuple:
    """Pairs (a, b) whose sum lands exactly half an ulp of a away from a (or 1.5 ulp): round-to-nearest-even ties."""
    if kind == "f32":
        a = (rng.standard_normal(n) * 2.0 ** rng.integers(-8, 9, n)).astype(np.float32)
        b = (np.spacing(np.abs(a)) * rng.choice([0.5, -0.5, 1.5, -1.5, 0.25], n)).astype(np.float32)
        return a.view(np.uint32), b.view(np.uint32)
    a = rng.standard_normal(n) * 2.0 ** rng.integers(-8, 9, n)
    b = np.spacing(np.abs(a)) * rng.choice([0.5, -0.5, 1.5, -1.5, 0.25], n)
    return a.view(np.uint64), b.view(np.uint64)


# --- elementwise forms ---------------------------------------------------------------------------
def _ident(name: str) -> str:
    return "k_" + re.sub(r"[^0-9A-Za-z]", "_", name)


def elementwise_source(kernel: str, asm: str, ins: list, out: str) -> str:
    """CUDA C of one elementwise kernel: ``out[i] = asm(in0[i], in1[i], ...)``.  ``asm`` names its output {d} and its
    inputs {a} {b} {c} {e}; a predicate operand ({p} in, {q} out) is made and read inside the asm block."""
    names = "abce"
    params, loads, cin, text = [], [], [], asm
    preds_in = []
    for i, kind in enumerate(ins):
        st = TYPES[_storage(kind)]
        params.append(f"const {st[1]}* __restrict__ in{i}")
        loads.append(f"{st[2]} x{i} = {st[4].format(f'in{i}[i]')};")
        if kind == "pred":
            preds_in.append(i)
        cin.append(f'"{st[3]}"(x{i})')
    ost = TYPES[_storage(out)]
    params.append(f"{ost[1]}* __restrict__ out")
    # operand numbering: %0 the output, %1.. the inputs
    mapping = {"d": "%0"}
    for i in range(len(ins)):
        mapping[names[i]] = f"%{i + 1}"
    prologue, epilogue = [], []
    if preds_in:
        (pi,) = preds_in
        prologue.append(f"setp.ne.b32 pin, %{pi + 1}, 0;")
        mapping["p"] = "pin"
    if out == "pred":
        mapping["d"] = "pout"
        epilogue.append("selp.u32 %0, 1, 0, pout;")
    body = text.format(**mapping)
    if preds_in or out == "pred":
        decl = ".reg .pred " + ", ".join(x for x, on in (("pin", preds_in), ("pout", out == "pred")) if on) + ";"
        body = "{ " + " ".join([decl, *prologue, body, *epilogue]) + " }"
    asm_line = f'asm volatile("{body}" : "={ost[3]}"(r) : {", ".join(cin)});'
    return (f'extern "C" __global__ void {kernel}({", ".join(params)}, int n) {{\n'
            f"    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"    if (i >= n) return;\n"
            f"    {' '.join(loads)}\n"
            f"    {ost[2]} r;\n"
            f"    {asm_line}\n"
            f"    out[i] = {ost[5].format('r')};\n"
            f"}}\n")


def ew(name, family, asm, ins, out, *, arch="compute_75", special=None, extra=None, approx=None, note="",
       source=None, n=N):
    """One elementwise form; ``extra(rng, n)`` may return input columns to splice in after the edges."""
    def build(rng):
        cols = operands(ins, n, rng, special)
        if extra is not None:
            more = extra(rng)
            k = len(more[0])
            start = n - k - 64
            for i, col in enumerate(more):
                cols[i][start:start + k] = np.asarray(col).astype(cols[i].dtype)
        kernel = _ident(name)
        src = source(kernel) if source else elementwise_source(kernel, asm, ins, out)
        args = [{"name": f"in{i}", "role": "in", "dtype": str(c.dtype), "count": n} for i, c in enumerate(cols)]
        args.append({"name": "out", "role": "out", "dtype": str(_dtype(out)), "count": n})
        args.append({"name": "n", "role": "scalar", "type": "s32", "value": n})
        return Form(name, family, kernel, src, arch, ((n + BLOCK - 1) // BLOCK, 1, 1), (BLOCK, 1, 1), args,
                    {f"in{i}": c for i, c in enumerate(cols)}, {"out": out},
                    "approx" if approx else "exact", approx or {}, note)
    return build


CATALOGUE = []  # builders: rng -> Form


def add(builder):
    CATALOGUE.append(builder)


def tie_extra(kind, k=96):
    return lambda rng: list(ties(kind, k, rng))


# integer arithmetic
for t in ("s32", "u64"):
    add(ew(f"add.{t}", "int", "add." + t + " {d}, {a}, {b};", [t, t], t))
    add(ew(f"sub.{t}", "int", "sub." + t + " {d}, {a}, {b};", [t, t], t))
add(ew("add.sat.s32", "int", "add.sat.s32 {d}, {a}, {b};", ["s32", "s32"], "s32"))
add(ew("sub.sat.s32", "int", "sub.sat.s32 {d}, {a}, {b};", ["s32", "s32"], "s32"))
for t in ("s32", "u32", "s64", "u64"):
    add(ew(f"mul.lo.{t}", "int", f"mul.lo.{t} {{d}}, {{a}}, {{b}};", [t, t], t))
    add(ew(f"mul.hi.{t}", "int", f"mul.hi.{t} {{d}}, {{a}}, {{b}};", [t, t], t))
    add(ew(f"mad.lo.{t}", "int", f"mad.lo.{t} {{d}}, {{a}}, {{b}}, {{c}};", [t, t, t], t))
add(ew("mad.hi.u32", "int", "mad.hi.u32 {d}, {a}, {b}, {c};", ["u32", "u32", "u32"], "u32"))
for t, w in (("s32", "s64"), ("u32", "u64")):
    add(ew(f"mul.wide.{t}", "int", f"mul.wide.{t} {{d}}, {{a}}, {{b}};", [t, t], w))
    add(ew(f"mad.wide.{t}", "int", f"mad.wide.{t} {{d}}, {{a}}, {{b}}, {{c}};", [t, t, w], w))
add(ew("mul24.lo.s32", "int", "mul24.lo.s32 {d}, {a}, {b};", ["s32", "s32"], "s32"))
DIVISORS32 = [1, 2, 3, 7, 0xFFFFFFFF, 0xFFFFFFFE, 0x80000000, 0x7FFFFFFF, 10, 0x10000, 0xFFFFFFF9, 1000003]
DIVISORS64 = [1, 2, 3, 7, 0xFFFFFFFFFFFFFFFF, 0x8000000000000000, 0x7FFFFFFFFFFFFFFF, 10, 0x100000000, 0xFFFFFFFF,
              0xFFFFFFFFFFFFFFF9, 1000003]
for op in ("div", "rem"):
    for t in ("s32", "u32", "s64", "u64"):
        divs = DIVISORS32 if t.endswith("32") else DIVISORS64
        add(ew(f"{op}.{t}", "int", f"{op}.{t} {{d}}, {{a}}, {{b}};", [t, t], t, special={1: divs},
               note="divisors never 0 (PTX: division by zero gives an unspecified value); INT_MIN / -1 included"))
for op in ("min", "max"):
    for t in ("s32", "u32", "s64", "u64"):
        add(ew(f"{op}.{t}", "int", f"{op}.{t} {{d}}, {{a}}, {{b}};", [t, t], t))
add(ew("abs.s32", "int", "abs.s32 {d}, {a};", ["s32"], "s32"))
add(ew("neg.s32", "int", "neg.s32 {d}, {a};", ["s32"], "s32"))
add(ew("abs.s64", "int", "abs.s64 {d}, {a};", ["s64"], "s64"))
add(ew("sad.u32", "int", "sad.u32 {d}, {a}, {b}, {c};", ["u32", "u32", "u32"], "u32"))

# shifts and bits
for t in ("b32", "u32", "s32"):
    op = {"b32": "shl.b32", "u32": "shr.u32", "s32": "shr.s32"}[t]
    add(ew(op, "bits", op + " {d}, {a}, {b};", ["u32", "u32"], "u32", special={1: SHIFTS}))
for op in ("shl.b64", "shr.u64", "shr.s64"):
    add(ew(op, "bits", op + " {d}, {a}, {b};", ["u64", "u32"], "u64", special={1: SHIFTS}))
for d in ("l", "r"):
    for m in ("wrap", "clamp"):
        add(ew(f"shf.{d}.{m}.b32", "bits", f"shf.{d}.{m}.b32 {{d}}, {{a}}, {{b}}, {{c}};", ["u32", "u32", "u32"],
               "u32", special={2: SHIFTS}))
POSITIONS = [0, 1, 7, 8, 15, 16, 24, 31, 32, 33, 63, 64, 65, 255, 256, 0x101, 0xFFFFFFFF]
for t in ("u32", "s32"):
    add(ew(f"bfe.{t}", "bits", f"bfe.{t} {{d}}, {{a}}, {{b}}, {{c}};", [t, "u32", "u32"], t,
           special={1: POSITIONS, 2: POSITIONS}))
for t in ("u64", "s64"):
    add(ew(f"bfe.{t}", "bits", f"bfe.{t} {{d}}, {{a}}, {{b}}, {{c}};", [t, "u32", "u32"], t,
           special={1: POSITIONS, 2: POSITIONS}))
add(ew("bfi.b32", "bits", "bfi.b32 {d}, {a}, {b}, {c}, {e};", ["u32", "u32", "u32", "u32"], "u32",
       special={2: POSITIONS, 3: POSITIONS}))
add(ew("bfi.b64", "bits", "bfi.b64 {d}, {a}, {b}, {c}, {e};", ["u64", "u64", "u32", "u32"], "u64",
       special={2: POSITIONS, 3: POSITIONS}))
for mode in ("", ".f4e", ".b4e", ".rc8", ".ecl", ".ecr", ".rc16"):
    add(ew(f"prmt.b32{mode}", "bits", f"prmt.b32{mode} {{d}}, {{a}}, {{b}}, {{c}};", ["u32", "u32", "u32"], "u32",
           special={2: [0x3210, 0x7654, 0x0123, 0x4444, 0x8888, 0xBA98, 0x5140, 0xFFFF, 0x0000, 0x1, 0x2, 0x3]}))
for op in ("brev", "popc", "clz"):
    add(ew(f"{op}.b32", "bits", f"{op}.b32 {{d}}, {{a}};", ["u32"], "u32"))
    add(ew(f"{op}.b64", "bits", f"{op}.b64 {{d}}, {{a}};", ["u64"], "u32" if op != "brev" else "u64"))
add(ew("bfind.u32", "bits", "bfind.u32 {d}, {a};", ["u32"], "u32"))
add(ew("bfind.s32", "bits", "bfind.s32 {d}, {a};", ["s32"], "u32"))
add(ew("bfind.shiftamt.u32", "bits", "bfind.shiftamt.u32 {d}, {a};", ["u32"], "u32"))
for op in ("and", "or", "xor"):
    add(ew(f"{op}.b32", "bits", f"{op}.b32 {{d}}, {{a}}, {{b}};", ["u32", "u32"], "u32"))
add(ew("and.b64", "bits", "and.b64 {d}, {a}, {b};", ["u64", "u64"], "u64"))
add(ew("not.b32", "bits", "not.b32 {d}, {a};", ["u32"], "u32"))
add(ew("cnot.b32", "bits", "cnot.b32 {d}, {a};", ["u32"], "u32"))
for lut in (0x96, 0xE8, 0xCA, 0x1E):
    add(ew(f"lop3.b32.0x{lut:02x}", "bits", f"lop3.b32 {{d}}, {{a}}, {{b}}, {{c}}, 0x{lut:02x};",
           ["u32", "u32", "u32"], "u32"))

# comparisons and selection
for cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
    add(ew(f"setp.{cmp}.s32", "setp", f"setp.{cmp}.s32 {{d}}, {{a}}, {{b}};", ["s32", "s32"], "pred"))
for cmp in ("lo", "ls", "hi", "hs"):
    add(ew(f"setp.{cmp}.u32", "setp", f"setp.{cmp}.u32 {{d}}, {{a}}, {{b}};", ["u32", "u32"], "pred"))
add(ew("setp.lt.s64", "setp", "setp.lt.s64 {d}, {a}, {b};", ["s64", "s64"], "pred"))
add(ew("setp.lt.u64", "setp", "setp.lt.u64 {d}, {a}, {b};", ["u64", "u64"], "pred"))
for cmp in ("eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"):
    add(ew(f"setp.{cmp}.f32", "setp", f"setp.{cmp}.f32 {{d}}, {{a}}, {{b}};", ["f32", "f32"], "pred"))
add(ew("setp.eq.ftz.f32", "setp", "setp.eq.ftz.f32 {d}, {a}, {b};", ["f32", "f32"], "pred"))
add(ew("setp.lt.ftz.f32", "setp", "setp.lt.ftz.f32 {d}, {a}, {b};", ["f32", "f32"], "pred"))
for cmp in ("lt", "equ", "neu", "nan", "num"):
    add(ew(f"setp.{cmp}.f64", "setp", f"setp.{cmp}.f64 {{d}}, {{a}}, {{b}};", ["f64", "f64"], "pred"))
add(ew("setp.and.lt.f32", "setp", "setp.lt.and.f32 {d}, {a}, {b}, {p};", ["f32", "f32", "pred"], "pred"))
add(ew("selp.b32", "setp", "selp.b32 {d}, {a}, {b}, {p};", ["u32", "u32", "pred"], "u32"))
add(ew("selp.f64", "setp", "selp.f64 {d}, {a}, {b}, {p};", ["f64", "f64", "pred"], "f64"))
for test in ("finite", "infinite", "number", "notanumber", "normal", "subnormal"):
    add(ew(f"testp.{test}.f32", "setp", f"testp.{test}.f32 {{d}}, {{a}};", ["f32"], "pred"))

# conversions
CVT_INT = [("s32", "s8", "s32", "s32"), ("u32", "u8", "u32", "u32"), ("s32", "s16", "s32", "s32"),
           ("u32", "u16", "u32", "u32"), ("s64", "s32", "s32", "s64"), ("u64", "u32", "u32", "u64"),
           ("u32", "u64", "u64", "u32"), ("s32", "s64", "s64", "s32"), ("s64", "u32", "u32", "s64")]
for dst, src, kin, kout in CVT_INT:
    add(ew(f"cvt.{dst}.{src}", "cvt", f"cvt.{dst}.{src} {{d}}, {{a}};", [kin], kout))
for dst, src, kin, kout in (("s32", "s64", "s64", "s32"), ("u32", "s32", "s32", "u32"), ("s8", "s32", "s32", "s32"),
                            ("u16", "s32", "s32", "u32"), ("s32", "u32", "u32", "s32")):
    add(ew(f"cvt.sat.{dst}.{src}", "cvt", f"cvt.sat.{dst}.{src} {{d}}, {{a}};", [kin], kout))
I2F = [("rn", "f32", "s32"), ("rz", "f32", "s32"), ("rm", "f32", "u32"), ("rp", "f32", "u32"), ("rn", "f32", "u32"),
       ("rn", "f32", "s64"), ("rz", "f32", "u64"), ("rm", "f32", "s64"), ("rn", "f64", "s64"), ("rp", "f64", "u64"),
       ("rn", "f64", "s32")]
for rnd, dst, src in I2F:
    add(ew(f"cvt.{rnd}.{dst}.{src}", "cvt", f"cvt.{rnd}.{dst}.{src} {{d}}, {{a}};", [src], dst))
F32_TO_INT_EDGES = F32_EDGES + [0x3F000000, 0xBF000000, 0x3FC00000, 0xBFC00000, 0x40200000, 0xC0200000,
                                0x4EFFFFFF, 0xCEFFFFFF, 0x4F7FFFFF, 0x5EFFFFFF, 0xDEFFFFFF, 0x5F7FFFFF]
F2I = [("rni", "s32", "f32"), ("rzi", "s32", "f32"), ("rmi", "s32", "f32"), ("rpi", "s32", "f32"),
       ("rzi", "u32", "f32"), ("rni", "u32", "f32"), ("rzi", "s64", "f32"), ("rni", "u64", "f32"),
       ("rni", "s64", "f64"), ("rzi", "s32", "f64"), ("rzi", "u64", "f64"), ("rmi", "u32", "f64")]
for rnd, dst, src in F2I:
    add(ew(f"cvt.{rnd}.{dst}.{src}", "cvt", f"cvt.{rnd}.{dst}.{src} {{d}}, {{a}};", [src], dst,
           special={0: F32_TO_INT_EDGES} if src == "f32" else None))
add(ew("cvt.rzi.ftz.s32.f32", "cvt", "cvt.rzi.ftz.s32.f32 {d}, {a};", ["f32"], "s32"))
for rnd in ("rni", "rzi", "rmi", "rpi"):
    add(ew(f"cvt.{rnd}.f32.f32", "cvt", f"cvt.{rnd}.f32.f32 {{d}}, {{a}};", ["f32"], "f32",
           special={0: F32_TO_INT_EDGES}))
add(ew("cvt.rni.f64.f64", "cvt", "cvt.rni.f64.f64 {d}, {a};", ["f64"], "f64"))
add(ew("cvt.sat.f32.f32", "cvt", "cvt.sat.f32.f32 {d}, {a};", ["f32"], "f32"))
add(ew("cvt.ftz.f32.f32", "cvt", "cvt.ftz.f32.f32 {d}, {a};", ["f32"], "f32"))
for rnd in ("rn", "rz", "rm", "rp"):
    add(ew(f"cvt.{rnd}.f32.f64", "cvt", f"cvt.{rnd}.f32.f64 {{d}}, {{a}};", ["f64"], "f32"))
add(ew("cvt.rn.ftz.f32.f64", "cvt", "cvt.rn.ftz.f32.f64 {d}, {a};", ["f64"], "f32"))
add(ew("cvt.f64.f32", "cvt", "cvt.f64.f32 {d}, {a};", ["f32"], "f64"))
add(ew("cvt.ftz.f64.f32", "cvt", "cvt.ftz.f64.f32 {d}, {a};", ["f32"], "f64"))
for rnd in ("rn", "rz", "rm", "rp"):
    add(ew(f"cvt.{rnd}.f16.f32", "cvt", f"cvt.{rnd}.f16.f32 {{d}}, {{a}};", ["f32"], "f16"))
add(ew("cvt.f32.f16", "cvt", "cvt.f32.f16 {d}, {a};", ["f16"], "f32"))
add(ew("cvt.f64.f16", "cvt", "cvt.f64.f16 {d}, {a};", ["f16"], "f64"))
add(ew("cvt.rn.f16.f64", "cvt", "cvt.rn.f16.f64 {d}, {a};", ["f64"], "f16"))
add(ew("cvt.rni.s32.f16", "cvt", "cvt.rni.s32.f16 {d}, {a};", ["f16"], "s32"))
add(ew("cvt.rn.f16.s32", "cvt", "cvt.rn.f16.s32 {d}, {a};", ["s32"], "f16"))
add(ew("cvt.rn.f16x2.f32", "cvt", "cvt.rn.f16x2.f32 {d}, {a}, {b};", ["f32", "f32"], "f16x2", arch="compute_80"))
add(ew("cvt.rn.bf16.f32", "cvt", "cvt.rn.bf16.f32 {d}, {a};", ["f32"], "bf16", arch="compute_80"))
add(ew("cvt.rz.bf16.f32", "cvt", "cvt.rz.bf16.f32 {d}, {a};", ["f32"], "bf16", arch="compute_80"))
add(ew("cvt.rn.relu.bf16.f32", "cvt", "cvt.rn.relu.bf16.f32 {d}, {a};", ["f32"], "bf16", arch="compute_80"))
add(ew("cvt.rn.bf16x2.f32", "cvt", "cvt.rn.bf16x2.f32 {d}, {a}, {b};", ["f32", "f32"], "bf16x2",
       arch="compute_80"))
add(ew("cvt.rna.tf32.f32", "cvt", "cvt.rna.tf32.f32 {d}, {a};", ["f32"], "u32", arch="compute_80"))
add(ew("cvt.f32.bf16", "cvt", "cvt.f32.bf16 {d}, {a};", ["bf16"], "f32", arch="compute_80"))
add(ew("cvt.f32.bf16 (shift)", "cvt", "shl.b32 {d}, {a}, 16;", ["u32"], "f32",
       note="a bf16 widened by a 16-bit shift, as CUDA's headers do it where cvt.f32.bf16 is not used"))

# f32 arithmetic
APPROX_ULP = {  # the PTX ISA's documented maximum error, as the bound the test starts from
    "rcp.approx": {"ulp": 1, "doc": "rcp.approx.f32: max 1 ulp (PTX ISA)"},
    "sqrt.approx": {"ulp": 2, "doc": "sqrt.approx.f32: max relative error 2^-23 (PTX ISA): up to 2 ulp"},
    "rsqrt.approx": {"ulp": 2, "doc": "rsqrt.approx.f32: max relative error 2^-22.9 (PTX ISA); H200: 78 % exact"},
    "ex2.approx": {"ulp": 3, "doc": "ex2.approx.f32: max relative error 2^-22.5 (PTX ISA): up to 2.8 ulp; H200: 49 % "
                                    "exact, rest 1-2 ulp (EMULATOR.md)"},
    "lg2.approx": {"ulp": 2, "abs": 2.0 ** -22.6, "doc": "lg2.approx.f32: max absolute error 2^-22.6 (PTX ISA)"},
    "sin.approx": {"ulp": 2, "abs": 2.0 ** -20.5, "abs_within": 3.1415927,
                   "doc": "sin.approx.f32: max absolute error 2^-20.5 in [-pi, pi] (PTX ISA); outside, unbounded"},
    "cos.approx": {"ulp": 2, "abs": 2.0 ** -20.5, "abs_within": 3.1415927,
                   "doc": "cos.approx.f32: max absolute error 2^-20.5 in [-pi, pi] (PTX ISA); outside, unbounded"},
    "tanh.approx": {"ulp": 8, "abs": 2.0 ** -10.987, "doc": "tanh.approx.f32: max relative error 2^-11 (PTX ISA)"},
    "div.approx": {"ulp": 2, "doc": "div.approx.f32: max 2 ulp for |b| in [2^-126, 2^126] (PTX ISA)"},
    "div.full": {"ulp": 2, "doc": "div.full.f32: max 2 ulp (PTX ISA)"},
    "rcp.approx.ftz.f64": {"ulp": 2 ** 33,
                         "doc": "rcp.approx.ftz.f64: about 20 bits (the high word), PTX ISA gives no bound"},
    "rsqrt.approx.f64": {"ulp": 2 ** 33,
                       "doc": "rsqrt.approx.f64: about 20 bits (the high word), PTX ISA gives no bound"},
}


def approx_of(name):
    for key, tol in sorted(APPROX_ULP.items(), key=lambda kv: -len(kv[0])):
        if name.startswith(key):
            return dict(tol)
    return None


for op in ("add", "sub", "mul"):
    for mod in (".rn", ".rz", ".rm", ".rp", ".rn.ftz", ".rn.sat", ".rn.ftz.sat"):
        if op == "sub" and mod not in (".rn", ".rz", ".rn.ftz"):
            continue
        add(ew(f"{op}{mod}.f32", "f32", f"{op}{mod}.f32 {{d}}, {{a}}, {{b}};", ["f32", "f32"], "f32",
               extra=tie_extra("f32") if op != "mul" else None))
for op in ("add", "sub", "mul"):  # no rounding modifier: what NVRTC emits for a + b (ptxas may contract it)
    add(ew(f"{op}.f32", "f32", f"{op}.f32 {{d}}, {{a}}, {{b}};", ["f32", "f32"], "f32",
           extra=tie_extra("f32") if op != "mul" else None))
for mod in (".rn", ".rz", ".rm", ".rp", ".rn.ftz", ".rn.sat", ".rn.ftz.sat"):
    add(ew(f"fma{mod}.f32", "f32", f"fma{mod}.f32 {{d}}, {{a}}, {{b}}, {{c}};", ["f32", "f32", "f32"], "f32"))
for mod in (".rn", ".rz", ".rm", ".rp", ".rn.ftz", ".approx", ".approx.ftz", ".full", ".full.ftz"):
    name = f"div{mod}.f32"
    add(ew(name, "f32", f"div{mod}.f32 {{d}}, {{a}}, {{b}};", ["f32", "f32"], "f32", approx=approx_of(name)))
for op, mods in (("rcp", (".rn", ".rz", ".rn.ftz", ".approx", ".approx.ftz")),
                 ("sqrt", (".rn", ".rz", ".rn.ftz", ".approx", ".approx.ftz")),
                 ("rsqrt", (".approx", ".approx.ftz")), ("ex2", (".approx", ".approx.ftz")),
                 ("lg2", (".approx", ".approx.ftz")), ("sin", (".approx", ".approx.ftz")),
                 ("cos", (".approx", ".approx.ftz")), ("tanh", (".approx",))):
    for mod in mods:
        name = f"{op}{mod}.f32"
        add(ew(name, "f32", f"{name} {{d}}, {{a}};", ["f32"], "f32", approx=approx_of(name)))
for op in ("min", "max"):
    add(ew(f"{op}.f32", "f32", f"{op}.f32 {{d}}, {{a}}, {{b}};", ["f32", "f32"], "f32"))
    add(ew(f"{op}.ftz.f32", "f32", f"{op}.ftz.f32 {{d}}, {{a}}, {{b}};", ["f32", "f32"], "f32"))
    add(ew(f"{op}.NaN.f32", "f32", f"{op}.NaN.f32 {{d}}, {{a}}, {{b}};", ["f32", "f32"], "f32", arch="compute_80"))
for op in ("neg", "abs"):
    add(ew(f"{op}.f32", "f32", f"{op}.f32 {{d}}, {{a}};", ["f32"], "f32"))
    add(ew(f"{op}.ftz.f32", "f32", f"{op}.ftz.f32 {{d}}, {{a}};", ["f32"], "f32"))
add(ew("copysign.f32", "f32", "copysign.f32 {d}, {a}, {b};", ["f32", "f32"], "f32"))
add(ew("mul.f32+add.f32 (ptxas may fuse)", "f32", "{{ .reg .f32 t; mul.f32 t, {a}, {b}; add.f32 {d}, t, {c}; }}",
       ["f32", "f32", "f32"], "f32",
       note="PTX mul.f32 then add.f32 without rounding modifiers: ptxas may contract them into one FMA "
            "(EMULATOR.md: it did on the H200 in 100 % of elements)"))
add(ew("mul.rn.f32+add.rn.f32 (never fused)", "f32",
       "{{ .reg .f32 t; mul.rn.f32 t, {a}, {b}; add.rn.f32 {d}, t, {c}; }}", ["f32", "f32", "f32"], "f32",
       note="explicit .rn forbids contraction: two roundings"))


def _c_mul_add(kernel):
    return (f'extern "C" __global__ void {kernel}(const float* a, const float* b, const float* c, float* out, int n) {{\n'
            f"    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"    if (i < n) out[i] = a[i] * b[i] + c[i];\n"
            f"}}\n")


add(ew("C a*b+c (f32, default -fmad)", "f32", "", ["f32", "f32", "f32"], "f32", source=_c_mul_add,
       note="plain CUDA C a*b+c, no inline PTX: NVRTC's default --fmad=true contracts it (fma.rn.f32 in the PTX)"))

# f64 arithmetic
for op, mods in (("add", (".rn", ".rz", ".rm", ".rp")), ("sub", (".rn",)), ("mul", (".rn", ".rz", ".rm", ".rp"))):
    for mod in mods:
        add(ew(f"{op}{mod}.f64", "f64", f"{op}{mod}.f64 {{d}}, {{a}}, {{b}};", ["f64", "f64"], "f64",
               extra=tie_extra("f64") if op != "mul" else None))
for op in ("add", "mul"):
    add(ew(f"{op}.f64", "f64", f"{op}.f64 {{d}}, {{a}}, {{b}};", ["f64", "f64"], "f64"))
for mod in (".rn", ".rz", ".rm", ".rp"):
    add(ew(f"fma{mod}.f64", "f64", f"fma{mod}.f64 {{d}}, {{a}}, {{b}}, {{c}};", ["f64", "f64", "f64"], "f64"))
for mod in (".rn", ".rz", ".rm", ".rp"):
    add(ew(f"div{mod}.f64", "f64", f"div{mod}.f64 {{d}}, {{a}}, {{b}};", ["f64", "f64"], "f64"))
add(ew("rcp.rn.f64", "f64", "rcp.rn.f64 {d}, {a};", ["f64"], "f64"))
add(ew("sqrt.rn.f64", "f64", "sqrt.rn.f64 {d}, {a};", ["f64"], "f64"))
add(ew("rcp.approx.ftz.f64", "f64", "rcp.approx.ftz.f64 {d}, {a};", ["f64"], "f64",
       approx=approx_of("rcp.approx.ftz.f64")))
add(ew("rsqrt.approx.f64", "f64", "rsqrt.approx.f64 {d}, {a};", ["f64"], "f64", approx=approx_of("rsqrt.approx.f64")))
for op in ("min", "max", "neg", "abs"):
    ins = ["f64", "f64"] if op in ("min", "max") else ["f64"]
    add(ew(f"{op}.f64", "f64", f"{op}.f64 {{d}}, " + ", ".join("{" + x + "}" for x in "ab"[:len(ins)]) + ";",
           ins, "f64"))

# f16 / bf16 arithmetic
for op in ("add", "sub", "mul"):
    add(ew(f"{op}.rn.f16", "f16", f"{op}.rn.f16 {{d}}, {{a}}, {{b}};", ["f16", "f16"], "f16"))
add(ew("add.rn.ftz.f16", "f16", "add.rn.ftz.f16 {d}, {a}, {b};", ["f16", "f16"], "f16"))
add(ew("add.rn.sat.f16", "f16", "add.rn.sat.f16 {d}, {a}, {b};", ["f16", "f16"], "f16"))
add(ew("fma.rn.f16", "f16", "fma.rn.f16 {d}, {a}, {b}, {c};", ["f16", "f16", "f16"], "f16"))
add(ew("fma.rn.sat.f16", "f16", "fma.rn.sat.f16 {d}, {a}, {b}, {c};", ["f16", "f16", "f16"], "f16"))
add(ew("neg.f16", "f16", "neg.f16 {d}, {a};", ["f16"], "f16"))
add(ew("add.f16", "f16", "add.f16 {d}, {a}, {b};", ["f16", "f16"], "f16"))
for op in ("add", "mul"):
    add(ew(f"{op}.f16x2", "f16", f"{op}.f16x2 {{d}}, {{a}}, {{b}};", ["f16x2", "f16x2"], "f16x2"))
    add(ew(f"{op}.rn.f16x2", "f16", f"{op}.rn.f16x2 {{d}}, {{a}}, {{b}};", ["f16x2", "f16x2"], "f16x2"))
add(ew("fma.rn.f16x2", "f16", "fma.rn.f16x2 {d}, {a}, {b}, {c};", ["f16x2", "f16x2", "f16x2"], "f16x2"))
add(ew("fma.rn.relu.f16x2", "f16", "fma.rn.relu.f16x2 {d}, {a}, {b}, {c};", ["f16x2", "f16x2", "f16x2"], "f16x2",
       arch="compute_80"))
add(ew("min.f16x2", "f16", "min.f16x2 {d}, {a}, {b};", ["f16x2", "f16x2"], "f16x2", arch="compute_80"))
add(ew("max.NaN.f16", "f16", "max.NaN.f16 {d}, {a}, {b};", ["f16", "f16"], "f16", arch="compute_80"))
add(ew("abs.f16", "f16", "abs.f16 {d}, {a};", ["f16"], "f16", arch="compute_80"))
add(ew("ex2.approx.f16", "f16", "ex2.approx.f16 {d}, {a};", ["f16"], "f16",
       approx={"ulp": 2, "doc": "ex2.approx.f16: max relative error 2^-9.9 (PTX ISA)"}))
add(ew("fma.rn.bf16", "bf16", "fma.rn.bf16 {d}, {a}, {b}, {c};", ["bf16", "bf16", "bf16"], "bf16", arch="compute_80"))
add(ew("fma.rn.bf16x2", "bf16", "fma.rn.bf16x2 {d}, {a}, {b}, {c};", ["bf16x2", "bf16x2", "bf16x2"], "bf16x2",
       arch="compute_80"))
add(ew("fma.rn.relu.bf16x2", "bf16", "fma.rn.relu.bf16x2 {d}, {a}, {b}, {c};", ["bf16x2", "bf16x2", "bf16x2"],
       "bf16x2", arch="compute_80"))
add(ew("min.bf16x2", "bf16", "min.bf16x2 {d}, {a}, {b};", ["bf16x2", "bf16x2"], "bf16x2", arch="compute_80"))
add(ew("max.bf16", "bf16", "max.bf16 {d}, {a}, {b};", ["bf16", "bf16"], "bf16", arch="compute_80"))
add(ew("neg.bf16x2", "bf16", "neg.bf16x2 {d}, {a};", ["bf16x2"], "bf16x2", arch="compute_80"))
add(ew("abs.bf16x2", "bf16", "abs.bf16x2 {d}, {a};", ["bf16x2"], "bf16x2", arch="compute_80"))


# --- warp forms -------------------------------------------------------------------------------------
WARPS = 8  # warps of a warp form (one block of 256 threads)


def _warp_form(name, family, kernel, body, ins, outs, *, arch="compute_75", threads=32 * WARPS, shared=0,
               compare="exact", tol=None, note="", grid=1):
    """A kernel with arrays ``ins`` (name -> array) and ``outs`` (name -> (kind, count)) and a body using them."""
    params = []
    for n_, a in ins.items():
        params.append(f"const {TYPES[_storage(_kind_of(a))][1]}* __restrict__ {n_}")
    for n_, (kind, _) in outs.items():
        params.append(f"{TYPES[_storage(kind)][1]}* __restrict__ {n_}")
    src = (f'extern "C" __global__ void {kernel}({", ".join(params)}) {{\n'
           f"    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           + ("    int lane = threadIdx.x & 31;\n" if "lane" in body else "")
           + f"{body}}}\n")
    args = [{"name": n_, "role": "in", "dtype": str(a.dtype), "count": int(a.size)} for n_, a in ins.items()]
    args += [{"name": n_, "role": "out", "dtype": str(_dtype(kind)), "count": int(c)} for n_, (kind, c) in outs.items()]
    block = threads // grid
    return Form(name, family, kernel, src, arch, (grid, 1, 1), (block, 1, 1), args, dict(ins),
                {n_: kind for n_, (kind, _) in outs.items()}, compare, tol or {}, note, shared)


def _kind_of(array):
    return {np.dtype("uint32"): "u32", np.dtype("uint64"): "u64", np.dtype("uint16"): "u16"}[array.dtype]


def shfl_form(mode, c, mask=0xFFFFFFFF, label=""):
    name = f"shfl.sync.{mode}.b32 c=0x{c:x}" + (f" mask=0x{mask:08x}" if mask != 0xFFFFFFFF else "") + label

    def build(rng):
        t = 32 * WARPS
        a = random_values("u32", t, rng)
        if mode == "idx":
            b = rng.integers(0, 32, t).astype(np.uint32)
            b[:32] = np.arange(32)[::-1]
            b[32:64] = 37  # out of range: only the low 5 bits count
            if mask != 0xFFFFFFFF:
                b &= 15
        else:
            b = np.repeat(np.array([1, 2, 4, 8, 16, 0, 3, 31], np.uint32), 32)[:t]
            if mask != 0xFFFFFFFF:
                b &= 15  # every source lane inside the mask
        guard = f"if ((0x{mask:08x}u >> lane) & 1u) " if mask != 0xFFFFFFFF else ""
        body = (f"    unsigned d = 0xdeadbeefu, p = 7u;\n"
                f"    {guard}asm volatile(\"{{ .reg .pred q; shfl.sync.{mode}.b32 %0|q, %2, %3, 0x{c:x}, 0x{mask:08x}; "
                f"selp.u32 %1, 1, 0, q; }}\" : \"=r\"(d), \"=r\"(p) : \"r\"(a[i]), \"r\"(b[i]));\n"
                f"    out[i] = d; pred[i] = p;\n")
        return _warp_form(name, "warp", _ident(name), body, {"a": a, "b": b}, {"out": ("u32", t), "pred": ("u32", t)},
                          note="lanes outside the mask do not execute the shuffle and write 0xdeadbeef, 7")
    return build


for mode, c in (("idx", 0x1F), ("idx", 0x181F), ("idx", 0x0), ("up", 0x0), ("up", 0x1C00), ("down", 0x1F),
                ("down", 0x181F), ("bfly", 0x1F), ("bfly", 0x1C1F)):
    add(shfl_form(mode, c))
add(shfl_form("idx", 0x100F, mask=0x0000FFFF, label=" (half warp)"))
add(shfl_form("bfly", 0x1F, mask=0x0000FFFF, label=" (half warp, bfly < 16 only)"))


def _vote_inputs(rng, t):
    p = rng.integers(0, 2, t).astype(np.uint32)
    p[0:32] = 0
    p[32:64] = 1
    p[64:96] = 0
    p[64 + 17] = 1
    p[96:128] = 1
    p[96 + 31] = 0
    return p


def vote_form(mode):
    name = f"vote.sync.{mode}"

    def build(rng):
        t = 32 * WARPS
        p = _vote_inputs(rng, t)
        if mode == "ballot.b32":
            inner = "vote.sync.ballot.b32 %0, q, 0xffffffff;"
        else:
            inner = f"{{ .reg .pred r; vote.sync.{mode}.pred r, q, 0xffffffff; selp.u32 %0, 1, 0, r; }}"
        body = (f"    unsigned d;\n"
                f"    asm volatile(\"{{ .reg .pred q; setp.ne.u32 q, %1, 0; {inner} }}\" : \"=r\"(d) : \"r\"(a[i]));\n"
                f"    out[i] = d;\n")
        return _warp_form(name, "warp", _ident(name), body, {"a": p}, {"out": ("u32", t)})
    return build


for mode in ("all", "any", "uni", "ballot.b32"):
    add(vote_form(mode))


def match_form(mode, kind):
    name = f"match.{mode}.sync.{kind}"

    def build(rng):
        t = 32 * WARPS
        dt = _dtype("u64" if kind == "b64" else "u32")
        a = rng.integers(0, 4, t).astype(dt)
        a[0:32] = 5
        a[32:64] = np.arange(32)
        a[64:96] = rng.integers(0, 2, 32) * (0x100000000 if kind == "b64" else 0x10000) + 3
        a = a.astype(dt)
        cons = "l" if kind == "b64" else "r"
        if mode == "any":
            body = (f"    unsigned d;\n"
                    f"    asm volatile(\"match.any.sync.{kind} %0, %1, 0xffffffff;\" : \"=r\"(d) : \"{cons}\"(a[i]));\n"
                    f"    out[i] = d; pred[i] = 0;\n")
        else:
            body = (f"    unsigned d, p;\n"
                    f"    asm volatile(\"{{ .reg .pred q; match.all.sync.{kind} %0|q, %2, 0xffffffff; "
                    f"selp.u32 %1, 1, 0, q; }}\" : \"=r\"(d), \"=r\"(p) : \"{cons}\"(a[i]));\n"
                    f"    out[i] = d; pred[i] = p;\n")
        return _warp_form(name, "warp", _ident(name), body, {"a": a}, {"out": ("u32", t), "pred": ("u32", t)})
    return build


add(match_form("any", "b32"))
add(match_form("any", "b64"))
add(match_form("all", "b32"))


def redux_form(op, t):
    name = f"redux.sync.{op}.{t}"

    def build(rng):
        n = 32 * WARPS
        a = random_values("u32", n, rng)
        a[:32] = 0xFFFFFFFF
        a[32:64] = 0x80000000
        body = (f"    unsigned d;\n"
                f"    asm volatile(\"redux.sync.{op}.{t} %0, %1, 0xffffffff;\" : \"=r\"(d) : \"r\"(a[i]));\n"
                f"    out[i] = d;\n")
        return _warp_form(name, "warp", _ident(name), body, {"a": a}, {"out": ("u32", n)}, arch="compute_80")
    return build


for op, t in (("add", "u32"), ("min", "s32"), ("max", "u32"), ("xor", "b32")):
    add(redux_form(op, t))


# --- mma.sync --------------------------------------------------------------------------------------
MMA_WARPS = 16
# name: (shape, A type, accumulator type, regs of A, B, C/D, arch, element kind of A/B words)
MMAS = {
    "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32": ("m16n8k8", "f16", "f32", 2, 1, 4, "compute_75", "f16x2"),
    "mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16": ("m16n8k8", "f16", "f16", 2, 1, 2, "compute_75", "f16x2"),
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32": ("m16n8k16", "f16", "f32", 4, 2, 4, "compute_80", "f16x2"),
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32": ("m16n8k16", "bf16", "f32", 4, 2, 4, "compute_80", "bf16x2"),
    "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32": ("m16n8k8", "bf16", "f32", 2, 1, 4, "compute_80", "bf16x2"),
    "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32": ("m16n8k8", "tf32", "f32", 4, 2, 4, "compute_80", "f32"),
    "mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32": ("m8n8k16", "s8", "s32", 1, 1, 2, "compute_75", "u32"),
}


def _mma_words(kind, count, rng, warp_cases):
    """Fragment words of a warp: normal-sized values of the element type, and per warp an edge case pattern."""
    if kind == "u32":  # s8 x 4
        return rng.integers(0, 2 ** 32, count, dtype=np.int64).astype(np.uint32)
    if kind == "f32":  # tf32: low 13 bits are ignored by the tensor core
        v = (rng.standard_normal(count) * 2.0 ** rng.integers(-4, 5, count)).astype(np.float32).view(np.uint32)
        return v
    n16 = count * 2
    vals = rng.standard_normal(n16) * 2.0 ** rng.integers(-3, 4, n16)
    if kind == "f16x2":
        h = vals.astype(np.float16).view(np.uint16)
    else:
        h = (vals.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return (h[0::2].astype(np.uint32) | (h[1::2].astype(np.uint32) << 16)).astype(np.uint32)


def mma_form(name):
    shape, ab, acc, ra, rb, rc, arch, wk = MMAS[name]

    def build(rng):
        t = 32 * MMA_WARPS
        A = _mma_words(wk, t * ra, rng, True)
        B = _mma_words(wk, t * rb, rng, True)
        if acc == "f32":
            C = (rng.standard_normal(t * rc) * 4).astype(np.float32).view(np.uint32)
        elif acc == "s32":
            C = rng.integers(-2 ** 20, 2 ** 20, t * rc).astype(np.int32).view(np.uint32)
        else:
            C = _mma_words("f16x2", t * rc, rng, True)
        # edge warps: warp 1 C = 0, warp 2 huge cancellation, warp 3 an inf and a NaN in A (f16/bf16)
        C[32 * rc:64 * rc] = 0
        if acc == "f32":
            C[64 * rc:96 * rc] = np.float32(2.0 ** 20).view(np.uint32)
        if ab in ("f16", "bf16"):
            inf, nan = (0x7C00, 0x7E00) if ab == "f16" else (0x7F80, 0x7FC0)
            A[96 * ra + 5] = (A[96 * ra + 5] & 0xFFFF0000) | inf
            A[96 * ra + 70] = (A[96 * ra + 70] & 0xFFFF) | (nan << 16)
            sub = 0x0001 if ab == "f16" else 0x0001
            A[128 * ra:160 * ra] = (A[128 * ra:160 * ra] & 0xFFFF0000) | sub  # subnormal halves
        d = lambda k: ", ".join(f"%{j}" for j in range(k[0], k[1]))  # noqa: E731
        cons_ab = "r"
        cons_c = {"f32": "f", "s32": "r", "f16": "r"}[acc]
        ctype = {"f32": "float", "s32": "unsigned", "f16": "unsigned"}[acc]
        load_c = "__uint_as_float" if acc == "f32" else ""
        store_d = "__float_as_uint" if acc == "f32" else ""
        o = 0
        dd = d((o, o + rc)); o += rc  # noqa: E702
        aa = d((o, o + ra)); o += ra  # noqa: E702
        bb = d((o, o + rb)); o += rb  # noqa: E702
        cc = d((o, o + rc)); o += rc  # noqa: E702
        outs_c = ", ".join(f'"={cons_c}"(rd[{j}])' for j in range(rc))
        ins_c = ", ".join([f'"{cons_ab}"(ra[{j}])' for j in range(ra)] + [f'"{cons_ab}"(rb[{j}])' for j in range(rb)]
                          + [f'"{cons_c}"(rc[{j}])' for j in range(rc)])
        body = (f"    unsigned ra[{ra}], rb[{rb}]; {ctype} rc[{rc}], rd[{rc}];\n"
                f"    for (int j = 0; j < {ra}; ++j) ra[j] = a[i * {ra} + j];\n"
                f"    for (int j = 0; j < {rb}; ++j) rb[j] = b[i * {rb} + j];\n"
                f"    for (int j = 0; j < {rc}; ++j) rc[j] = {load_c}(c[i * {rc} + j]);\n"
                f"    asm volatile(\"{name} {{{dd}}}, {{{aa}}}, {{{bb}}}, {{{cc}}};\"\n"
                f"        : {outs_c}\n"
                f"        : {ins_c});\n"
                f"    for (int j = 0; j < {rc}; ++j) out[i * {rc} + j] = {store_d}(rd[j]);\n")
        out_kind = {"f32": "f32", "s32": "u32", "f16": "f16x2"}[acc]
        k = int(shape.split("k")[1])
        tol = {} if acc == "s32" else {
            "warp_scale": True, "k": k, "rel": 2.0 ** -20 if acc == "f32" else 2.0 ** -9,
            "doc": "per warp |emulator - GPU| <= rel * (K * max|a| * max|b| + max|c|): the tensor cores' accumulation "
                   "truncates (EMULATOR.md: <= 5.2 * 2^-24 * (|A||B| + |C|) per element)"}
        return _warp_form(name, "mma", _ident(name), body, {"a": A, "b": B, "c": C}, {"out": (out_kind, t * rc)},
                          arch=arch, threads=t, grid=MMA_WARPS, compare="exact" if acc == "s32" else "approx",
                          tol=tol, note=f"one warp per block; per lane a[{ra}], b[{rb}], c[{rc}] fragment registers "
                                        f"(PTX ISA fragment layout), {MMA_WARPS} warps of random matrices, warp 1 "
                                        f"with C = 0, 2 with C = 2^20, 3 with an inf and a NaN in A, 4 with "
                                        f"subnormal halves in A")
    return build


for name in MMAS:
    add(mma_form(name))


# --- ldmatrix ------------------------------------------------------------------------------------
def ldmatrix_form(num, trans):
    name = f"ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16"

    def build(rng):
        blocks = 4
        rows = 64  # rows of 16 bytes in each block's shared memory
        data = rng.integers(0, 2 ** 32, blocks * rows * 4, dtype=np.int64).astype(np.uint32)
        idx = np.concatenate([rng.permutation(rows)[:32] for _ in range(blocks)]).astype(np.uint32)
        regs = ", ".join(f"%{j}" for j in range(num))
        outs_r = ", ".join(f'"=r"(r[{j}])' for j in range(num))
        body = (f"    __shared__ __align__(16) unsigned s[{rows * 4}];\n"
                f"    for (int j = threadIdx.x; j < {rows * 4}; j += blockDim.x) s[j] = a[blockIdx.x * {rows * 4} + j];\n"
                f"    __syncthreads();\n"
                f"    unsigned addr = (unsigned)__cvta_generic_to_shared(&s[b[i] * 4]);\n"
                f"    unsigned r[4] = {{0, 0, 0, 0}};\n"
                f"    asm volatile(\"ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16 "
                f"{{{regs}}}, [%{num}];\"\n"
                f"        : {outs_r} : \"r\"(addr));\n"
                f"    for (int j = 0; j < 4; ++j) out[i * 4 + j] = r[j];\n")
        return _warp_form(name, "ldmatrix", _ident(name), body, {"a": data, "b": idx},
                          {"out": ("u32", blocks * 32 * 4)}, threads=blocks * 32, grid=blocks,
                          note="one warp per block; b[i] is the shared-memory row (16 bytes) lane i points at; "
                               "registers past x{num} are written as 0")
    return build


for num in (1, 2, 4):
    for trans in (False, True):
        add(ldmatrix_form(num, trans))


# --- cp.async ---------------------------------------------------------------------------------------
def cp_async_form(cache, size, src_size=None):
    name = f"cp.async.{cache}.shared.global {size}" + (f" src-size {src_size}" if src_size is not None else "")

    def build(rng):
        t = 128
        words = t * size // 4
        data = rng.integers(0, 2 ** 32, words, dtype=np.int64).astype(np.uint32)
        extra = f", {src_size}" if src_size is not None else ""
        body = (f"    __shared__ __align__(16) unsigned s[{words}];\n"
                f"    for (int j = threadIdx.x; j < {words}; j += blockDim.x) s[j] = 0xa5a5a5a5u;\n"
                f"    __syncthreads();\n"
                f"    unsigned dst = (unsigned)__cvta_generic_to_shared(&s[i * {size // 4}]);\n"
                f"    asm volatile(\"{{ .reg .u64 g; cvta.to.global.u64 g, %1; "
                f"cp.async.{cache}.shared.global [%0], [g], {size}{extra}; }}\" :: \"r\"(dst), "
                f"\"l\"(a + i * {size // 4}));\n"
                f"    asm volatile(\"cp.async.commit_group;\");\n"
                f"    asm volatile(\"cp.async.wait_group 0;\");\n"
                f"    __syncthreads();\n"
                f"    for (int j = 0; j < {size // 4}; ++j)\n"
                f"        out[i * {size // 4} + j] = s[(i * {size // 4} + j + {size // 4}) % {words}];\n")
        return _warp_form(name, "cp.async", _ident(name), body, {"a": data}, {"out": ("u32", words)}, threads=t,
                          arch="compute_80", note="each thread copies its chunk, then reads its neighbour's after "
                                                  "wait_group 0 and a barrier")
    return build


add(cp_async_form("ca", 4))
add(cp_async_form("ca", 8))
add(cp_async_form("ca", 16))
add(cp_async_form("cg", 16))
add(cp_async_form("ca", 16, src_size=6))


# --- atomics ------------------------------------------------------------------------------------------
def atom_form(op, kind, space="global", slots=None, label=""):
    """atom.<space>.<op>.<kind>: without contention (slots None: thread i updates word i, returns the old value) or
    with contention (slots k: thread i updates word i % k, an operation whose final value does not depend on order)."""
    name = f"atom.{space}.{op}.{kind}" + (f" ({slots} slots)" if slots else "") + label

    def build(rng):
        t = 256
        vk = {"f32": "f32", "f64": "f64", "u32": "u32", "s32": "s32", "b32": "u32", "u64": "u64",
              "noftz.f16x2": "f16x2"}[kind]
        st = TYPES[_storage(vk)]
        words = slots or t
        if slots:
            a = random_values(vk, t, rng)
            init = random_values(vk, words, rng)
        else:
            a, init = operands([vk, vk], t, rng)
            init = init[:words]
        cas = op == "cas"
        bvals = random_values(vk, t, rng) if cas else None
        if cas:
            a[::2] = init[::2]  # a is the compare value: half the swaps happen
        cons = st[3] if vk in ("f32", "f64") else ("l" if st[0] == "uint64" else "r")
        ctype = st[2]
        loadx = st[4].format("a[i]")
        slot = f"(i % {slots})" if slots else "i"
        sh = ""
        if space == "shared":
            sh = (f"    __shared__ {st[1]} s[{words}];\n"
                  f"    for (int j = threadIdx.x; j < {words}; j += blockDim.x) s[j] = out[j];\n"
                  f"    __syncthreads();\n")
            addr = f"(unsigned)__cvta_generic_to_shared(&s[{slot}])"
            acons = "r"
        else:
            addr = f"out + {slot}"
            acons = "l"
        opnds = "%0, [g], %2, %3" if cas else "%0, [g], %2"
        cvta = "cvta.to.global.u64 g, %1;" if space == "global" else "mov.u32 g, %1;"
        gtype = "u64" if space == "global" else "u32"
        ins = f"\"{acons}\"({addr}), \"{cons}\"(x)" + (f", \"{cons}\"(y)" if cas else "")
        body = (sh + f"    {ctype} x = {loadx}, old;\n"
                + (f"    {ctype} y = {st[4].format('b[i]')};\n" if cas else "")
                + f"    asm volatile(\"{{ .reg .{gtype} g; {cvta} atom.{space}.{op}.{kind} {opnds}; }}\" "
                  f": \"={cons}\"(old) : {ins} : \"memory\");\n"
                + (f"    __syncthreads();\n    for (int j = threadIdx.x; j < {words}; j += blockDim.x) out[j] = s[j];\n"
                   if space == "shared" else "")
                + (f"    ret[i] = {st[5].format('old')};\n" if not slots else ""))
        # out is an in/out buffer: its initial contents are an input
        params_in = {"a": a}
        if cas:
            params_in["b"] = bvals
        outs = {} if slots else {"ret": (vk, t)}
        form = _warp_form(name, "atom", _ident(name), body, params_in, outs, threads=t,
                          arch="compute_75",
                          note="out starts as the stored input 'out'; " +
                               ("no contention: thread i updates out[i] and returns the old value in ret[i]"
                                if not slots else f"{t} threads update {slots} words; only the final words are "
                                                  "recorded (order-independent)"))
        # make 'out' an inout buffer placed right after the inputs
        form.source = form.source.replace(
            f"void {form.kernel}(", f"void {form.kernel}({st[1]}* __restrict__ out, ", 1)
        form.args.insert(0, {"name": "out", "role": "inout", "dtype": str(init.dtype), "count": int(words)})
        form.inputs["out"] = init
        form.outputs = {"out": vk, **form.outputs}
        return form
    return build


add(atom_form("add", "f32"))
add(atom_form("add", "f64"))
add(atom_form("add", "noftz.f16x2"))
add(atom_form("add", "f32", space="shared"))
add(atom_form("add", "u32", slots=7))
add(atom_form("add", "u32", space="shared", slots=5))
add(atom_form("add", "u64", slots=3))
add(atom_form("min", "s32", slots=7))
add(atom_form("max", "u32", slots=7))
add(atom_form("or", "b32", slots=7))
add(atom_form("xor", "b32", slots=7))
add(atom_form("exch", "b32"))
add(atom_form("cas", "b32"))
add(atom_form("inc", "u32"))
add(atom_form("dec", "u32"))


# --- wgmma (sm_90a) --------------------------------------------------------------------------------
# One warpgroup per block.  The block copies its image (random halves, every byte written) into 1024-byte-aligned
# shared memory, builds the two descriptors from the form's constants, and runs one wgmma.mma_async; each thread
# stores its accumulator registers in order.  Which halves the tensor cores read, and where they put the products,
# is the hardware's answer to the descriptor, the swizzle and the transposes: nothing of the layout is assumed here.
WGMMA_BLOCKS = 4
WGMMA_IMAGE = 44 * 1024  # bytes of shared memory per block, all written (with the alignment, under the 48 KiB a
WGMMA_B_AT = 12 * 1024   # block gets without opting in); where B's matrix starts (A at its own offset below)
# name suffix: (N, A from registers, trans-a, trans-b, swizzle mode, (A offset, LBO, SBO), (B LBO, SBO), type,
#               scale-d, scale-a, scale-b)
WGMMAS = {
    "ss K K sw128": (64, False, 0, 0, 1, (0, 16, 1024), (16, 1024), "f16", 1, 1, 1),
    "ss K K sw128 k-step 1": (64, False, 0, 0, 1, (32, 16, 1024), (16, 1024), "f16", 1, 1, 1),
    "ss K K sw64": (64, False, 0, 0, 2, (0, 16, 512), (16, 512), "f16", 1, 1, 1),
    "ss K K sw32": (64, False, 0, 0, 3, (0, 16, 256), (16, 256), "f16", 1, 1, 1),
    "ss K K interleave": (64, False, 0, 0, 0, (0, 128, 256), (128, 256), "f16", 1, 1, 1),
    "ss MN MN sw128": (128, False, 1, 1, 1, (0, 8192, 1024), (2048, 1024), "f16", 1, 1, 1),
    "ss K K sw128 n8": (8, False, 0, 0, 1, (0, 16, 1024), (16, 1024), "f16", 1, 1, 1),
    "ss K K sw128 n256": (256, False, 0, 0, 1, (0, 16, 1024), (16, 1024), "f16", 1, 1, 1),
    "ss K K sw128 bf16": (64, False, 0, 0, 1, (0, 16, 1024), (16, 1024), "bf16", 1, 1, 1),
    "ss K K sw128 no-acc neg-a": (64, False, 0, 0, 1, (0, 16, 1024), (16, 1024), "f16", 0, -1, 1),
    "rs MN sw128": (128, True, 0, 1, 1, (0, 0, 0), (2048, 1024), "f16", 1, 1, 1),
    "rs K sw128 neg-b": (64, True, 0, 0, 1, (0, 0, 0), (16, 1024), "f16", 1, 1, -1),
}


def wgmma_form(suffix):
    n, a_regs, trans_a, trans_b, swizzle, (a_at, a_lbo, a_sbo), (b_lbo, b_sbo), etype, scale_d, scale_a, scale_b = \
        WGMMAS[suffix]
    name = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{etype}.{etype} {suffix}"

    def build(rng):
        words = WGMMA_BLOCKS * WGMMA_IMAGE // 4
        kind = "f16x2" if etype == "f16" else "bf16x2"
        image = _mma_words(kind, words, rng, True)
        per_block = WGMMA_IMAGE // 4
        inf, nan = (0x7C00, 0x7E00) if etype == "f16" else (0x7F80, 0x7FC0)
        block3 = image[3 * per_block:4 * per_block]       # block 3: an inf and a NaN in every 512 bytes
        block3[5::128] = (block3[5::128] & 0xFFFF0000) | inf
        block3[70::128] = (block3[70::128] & 0xFFFF) | (nan << 16)
        image[2 * per_block:3 * per_block] &= 0xFFFF0000   # block 2: low halves +0 ...
        image[2 * per_block:3 * per_block] |= 0x0001       # ... then the smallest subnormal
        t = 128 * WGMMA_BLOCKS
        r = n // 2
        c = (rng.standard_normal(t * r) * 4).astype(np.float32).view(np.uint32)
        c[128 * r:2 * 128 * r] = np.float32(2.0 ** 20).view(np.uint32)   # block 1: C huge (cancellation)
        ins = {"image": image, "c": c}
        if a_regs:
            ins["a"] = _mma_words(kind, t * 4, rng, True)
        regs = ", ".join(f"%{j}" for j in range(r))
        outs = ", ".join(f'"+f"(d[{j}])' for j in range(r))
        if a_regs:
            a_operand = f"{{%{r}, %{r + 1}, %{r + 2}, %{r + 3}}}"
            b_operand, p_operand = f"%{r + 4}", f"%{r + 5}"
            tail = f"{scale_a}, {scale_b}, {trans_b}"
            in_list = ('"r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "l"(b_desc), '
                       f'"r"({scale_d})')
        else:
            a_operand, b_operand, p_operand = f"%{r}", f"%{r + 1}", f"%{r + 2}"
            tail = f"{scale_a}, {scale_b}, {trans_a}, {trans_b}"
            in_list = f'"l"(a_desc), "l"(b_desc), "r"({scale_d})'
        body = (
            f"    extern __shared__ __align__(1024) unsigned char sm[];\n"
            f"    const unsigned raw = (unsigned)__cvta_generic_to_shared(sm);\n"
            f"    const unsigned base = (raw + 1023u) & ~1023u;\n"
            f"    unsigned* s = reinterpret_cast<unsigned*>(sm + (base - raw));\n"
            f"    for (int j = threadIdx.x; j < {per_block}; j += blockDim.x) s[j] = image[blockIdx.x * {per_block} + j];\n"
            f"    asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");\n"
            f"    __syncthreads();\n"
            f"    float d[{r}];\n"
            f"    for (int j = 0; j < {r}; ++j) d[j] = __uint_as_float(c[i * {r} + j]);\n"
            + (f"    unsigned ra[4];\n    for (int j = 0; j < 4; ++j) ra[j] = a[i * 4 + j];\n" if a_regs else "")
            + f"    const unsigned long long sw = {swizzle}ull << 62;\n"
            + "".join(f"    const unsigned {x}_at = base + {at}u;\n"
                      f"    const unsigned long long {x}_desc = (({x}_at & 0x3FFFF) >> 4)"
                      f" | ((unsigned long long)({lbo} >> 4) << 16) | ((unsigned long long)({sbo} >> 4) << 32) | sw;\n"
                      for x, at, lbo, sbo in (("a", a_at, a_lbo, a_sbo), ("b", WGMMA_B_AT, b_lbo, b_sbo))
                      if x == "b" or not a_regs)
            + f"    asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n"
            f"    asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, {p_operand}, 0;\\n"
            f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{etype}.{etype} {{{regs}}}, {a_operand}, {b_operand}, p, "
            f"{tail};\\n}}\\n\"\n"
            f"        : {outs}\n"
            f"        : {in_list});\n"
            f"    asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n"
            f"    asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");\n"
            f"    for (int j = 0; j < {r}; ++j) out[i * {r} + j] = __float_as_uint(d[j]);\n")
        tol = {"warpgroup_scale": True, "k": 16, "rel": 2.0 ** -20,
               "doc": "per warpgroup |emulator - GPU| <= rel * (K * max|image or a|^2 + max|c|): the emulator's "
                      "accumulation is mma.sync's H200 model (ops_tensor.accumulate_f32), not measured for wgmma"}
        return _warp_form(name, "wgmma", _ident(name), body, ins, {"out": ("f32", t * r)}, arch="compute_90a",
                          threads=t, grid=WGMMA_BLOCKS, compare="approx", tol=tol, shared=WGMMA_IMAGE + 1024,
                          note=f"one warpgroup per block; the block's {WGMMA_IMAGE // 1024} KiB image of random "
                               f"{etype} in shared memory, A {'in registers (a, 4 per thread)' if a_regs else f'at +{a_at}'}"
                               f", B at +{WGMMA_B_AT}; block 1 with C = 2^20, 2 with subnormal halves, 3 with infs "
                               f"and NaNs in the image")
    return build


for suffix in WGMMAS:
    add(wgmma_form(suffix))


# --- building, compiling, running -------------------------------------------------------------------
def _matches(form: Form, patterns: str) -> bool:
    return any(fnmatch.fnmatchcase(form.name, p) or fnmatch.fnmatchcase(form.family, p) for p in patterns.split(","))


def build_forms(only: str | None, skip: str | None = None) -> list:
    rng = np.random.default_rng(SEED)
    forms = []
    for builder in CATALOGUE:
        form = builder(rng)  # every builder draws from the one generator: same inputs whatever --only says
        if (only and not _matches(form, only)) or (skip and _matches(form, skip)):
            continue
        forms.append(form)
    names = [f.name for f in forms]
    assert len(names) == len(set(names)), "duplicate form names"
    return forms


def dry_compile(form: Form) -> str | None:
    """NVRTC PTX for the form's virtual architecture, and ptxas for the matching real one and sm_90 (inline PTX is
    only checked by ptxas).  None when all pass, else the first error."""
    from autograder.checks.core import CheckFailed
    from autograder.gpu import nvrtc

    try:
        form_ptx = nvrtc.ptx(form.source, arch=form.arch)
    except CheckFailed as error:
        return f"{form.arch}: {error}"
    for arch in dict.fromkeys((form.arch.replace("compute", "sm"), "sm_90" if not form.arch.endswith("a") else "sm_90a")):
        compiled = nvrtc.compile_source(form.source, arch=arch)
        if not compiled.ok:
            errors = [line for line in compiled.log.splitlines() if "error" in line.lower()]
            return f"{arch}: " + (" | ".join(errors) or compiled.log)[:400]
    form.ptx = form_ptx
    return None


def _ptx_version_for_driver(driver_version: int) -> str | None:
    """The newest PTX ISA a driver of this CUDA version JIT-compiles (CUDA 12.x: 8.x, 13.0: 9.0, ...)."""
    major, minor = driver_version // 1000, (driver_version % 1000) // 10
    table = {(12, 0): "8.0", (12, 1): "8.1", (12, 2): "8.2", (12, 3): "8.3", (12, 4): "8.4", (12, 5): "8.5",
             (12, 6): "8.5", (12, 8): "8.7", (12, 9): "8.8", (13, 0): "9.0", (13, 1): "9.1", (13, 2): "9.2"}
    return table.get((major, minor))


#: Errors after which a CUDA context cannot launch again: the remaining forms are recorded as not run (run them
#: with --skip naming the faulting form, or --only).
CONTEXT_LOST = ("ILLEGAL_ADDRESS", "IllegalAddress", "ILLEGAL_INSTRUCTION", "IllegalInstruction", "LAUNCH_FAILED",
                "LaunchFailure", "MISALIGNED", "Misaligned", "HARDWARE_STACK", "ASSERT")


def _ptx_with_cupy(source: str, arch: str) -> str:
    """PTX through CuPy's own NVRTC binding, with the options of :func:`autograder.gpu.nvrtc.ptx`: the fallback for
    a machine whose ``cuda.bindings`` cannot load NVRTC."""
    from cupy_backends.cuda.libs import nvrtc as cupy_nvrtc

    program = cupy_nvrtc.createProgram(source, "kernel.cu", (), ())
    try:
        try:
            cupy_nvrtc.compileProgram(program, [f"-arch={arch}", "-std=c++17", "-lineinfo"])
        except Exception as error:
            raise RuntimeError(f"NVRTC: {cupy_nvrtc.getProgramLog(program)}") from error
        text = cupy_nvrtc.getPTX(program)
    finally:
        cupy_nvrtc.destroyProgram(program)
    return (text.decode() if isinstance(text, bytes) else text).rstrip("\x00")


class GpuRunner:
    def __init__(self):
        import cupy as cp

        self.cp = cp
        props = cp.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        self.device = {"name": name, "compute_capability": f"{props['major']}.{props['minor']}",
                       "driver_version": cp.cuda.runtime.driverGetVersion(),
                       "runtime_version": cp.cuda.runtime.runtimeGetVersion(), "cupy": cp.__version__}
        from autograder.gpu import nvrtc

        if nvrtc._NVRTC is not None:
            self.make_ptx = nvrtc.ptx
            _, major, minor = nvrtc._NVRTC.nvrtcVersion()
            self.device["ptx_compiler"] = f"autograder.gpu.nvrtc.ptx (cuda.bindings NVRTC {major}.{minor})"
        else:
            self.make_ptx = _ptx_with_cupy
            self.device["ptx_compiler"] = "CuPy's NVRTC binding (cuda.bindings could not load NVRTC)"
        try:
            from cupy.cuda import compiler

            self.device["cupy_nvrtc"] = ".".join(map(str, compiler._get_nvrtc_version()))
        except Exception:  # noqa: BLE001  (a private helper: only informative)
            pass

    def _args(self, form: Form):
        cp = self.cp
        buffers, call = {}, []
        for arg in form.args:
            if arg["role"] == "scalar":
                call.append(np.int32(arg["value"]))
                continue
            if arg["name"] in form.inputs:
                buf = cp.asarray(form.inputs[arg["name"]])
            else:
                buf = cp.zeros(arg["count"], dtype=arg["dtype"])
            buffers[arg["name"]] = buf
            call.append(buf)
        return buffers, tuple(call)

    def launch(self, fn, form: Form) -> dict:
        buffers, call = self._args(form)
        fn(form.grid, form.block, call, shared_mem=form.shared_bytes)
        self.cp.cuda.Device().synchronize()
        return {name: self.cp.asnumpy(buffers[name]) for name in form.outputs}

    def native(self, form: Form) -> dict | None:
        """The form built as the lessons' cp.RawKernel is (CuPy's options, a cubin for the device); None for an
        sm_90a form (CuPy compiles for sm_90, where wgmma does not exist: only its PTX runs)."""
        if form.arch.endswith("a"):
            return None
        module = self.cp.RawModule(code=form.source)
        return self.launch(module.get_function(form.kernel), form)

    def from_ptx(self, form: Form) -> dict:
        cp = self.cp
        text = self.make_ptx(form.source, arch=form.arch)
        module = cp.cuda.function.Module()
        try:
            module.load(text.encode() + b"\0")
        except cp.cuda.driver.CUDADriverError as error:
            # NVRTC newer than the driver: its .version may be past what the driver JITs; lower it.
            version = _ptx_version_for_driver(self.device["driver_version"])
            if "UNSUPPORTED_PTX_VERSION" not in str(error) or version is None:
                raise
            text = re.sub(r"^\.version \d+\.\d+", f".version {version}", text, count=1, flags=re.M)
            form.note = (form.note + "; " if form.note else "") + f"PTX .version lowered to {version} for the driver"
            module = cp.cuda.function.Module()
            module.load(text.encode() + b"\0")
        form.ptx = text
        return self.launch(module.get_function(form.kernel), form)


def bit_equal_rate(x: dict, y: dict) -> float:
    total = equal = 0
    for name in x:
        total += x[name].size
        equal += int(np.count_nonzero(x[name] == y[name]))
    return equal / total if total else 1.0


def manifest_entry(form: Form) -> dict:
    return {"name": form.name, "family": form.family, "kernel": form.kernel, "arch": form.arch,
            "source": form.source, "ptx": getattr(form, "ptx", None), "grid": list(form.grid),
            "block": list(form.block), "shared_bytes": form.shared_bytes, "args": form.args,
            "outputs": form.outputs, "elements": form.elements, "compare": form.compare,
            "tolerance": form.tolerance, "note": form.note}


def merged(out: Path, run: dict, arrays: dict) -> tuple[dict, dict]:
    """The golden data in ``out`` with this run's forms put in (replacing forms of the same name): each merged form
    records its run (``run``: date, device, command); the manifest lists the merges (``merged``)."""
    meta = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    with np.load(out / "data.npz") as data:
        old = {key: data[key] for key in data.files}
    names = {entry["name"] for entry in run["forms"]}
    provenance = {key: run[key] for key in ("date", "device", "command")}
    kept = [entry for entry in meta["forms"] if entry["name"] not in names]
    meta["forms"] = kept + [dict(entry, run=provenance) for entry in run["forms"]]
    meta.setdefault("merged", []).append(dict(provenance, forms=sorted(names)))
    combined = {key: value for key, value in old.items() if key.split("__", 1)[0] not in names}
    combined.update(arrays)
    return meta, combined


def merge_run(run_folder: Path, out: Path) -> int:
    """--merge-from: the GPU run in ``run_folder`` merged into the golden data in ``out``."""
    run = json.loads((run_folder / "manifest.json").read_text(encoding="utf-8"))
    if run.get("kind") != "gpu" or not (out / "manifest.json").exists():
        print(f"nothing merged: {run_folder} must hold a GPU run and {out} golden data to merge into")
        return 1
    with np.load(run_folder / "data.npz") as data:
        arrays = {key: data[key] for key in data.files}
    meta, arrays = merged(out, run, arrays)
    np.savez_compressed(out / "data.npz", **arrays)
    (out / "manifest.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"merged {len(run['forms'])} forms of {run['date']} into {out} ({len(meta['forms'])} forms)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="no GPU: build, compile and write inputs and PTX")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"output folder (default {DEFAULT_OUT.relative_to(ROOT)}; a temporary one for --dry-run)")
    parser.add_argument("--only", default=None, help="comma-separated fnmatch patterns of form names or families")
    parser.add_argument("--skip", default=None, help="comma-separated fnmatch patterns of forms or families to leave out")
    parser.add_argument("--time-limit-s", type=float, default=280.0,
                        help="stop starting new forms after this many seconds (the rest are recorded as not run)")
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    parser.add_argument("--merge-from", type=Path, default=None, metavar="RUN",
                        help="no GPU: put the forms of the run in folder RUN (a GPU run with --only) into the golden "
                             "data in --out, each with its run's date, device and command")
    args = parser.parse_args(argv)
    started = time.monotonic()
    forms = build_forms(args.only, args.skip)
    if args.list:
        for form in forms:
            print(f"{form.family:9s} {form.arch:11s} {form.elements:5d}  {form.name}")
        print(f"{len(forms)} forms")
        return 0
    out = args.out or (Path(tempfile.mkdtemp(prefix="emulator_golden_")) if args.dry_run else DEFAULT_OUT)
    if args.merge_from:
        return merge_run(args.merge_from, out)
    out.mkdir(parents=True, exist_ok=True)
    runner = None if args.dry_run else GpuRunner()
    arrays, entries, rows, failed = {}, [], [], []
    lost = None  # the form after whose fault the CUDA context is unusable
    for number, form in enumerate(forms):
        entry = None
        why_not = ("time limit" if time.monotonic() - started > args.time_limit_s
                   else f"the CUDA context was lost at {lost}" if lost else None)
        if why_not:
            entry = manifest_entry(form)
            entry["results"] = {"outputs": [], "error": f"not run: {why_not}"}
            entries.append(entry)
            failed.append((form.name, f"not run: {why_not}"))
            continue
        if number % 50 == 0:
            print(f"[{time.monotonic() - started:6.1f} s] form {number + 1} of {len(forms)}: {form.name}", flush=True)
        for name, value in form.inputs.items():
            arrays[f"{form.name}__in__{name}"] = value
        if args.dry_run:
            error = dry_compile(form)
            entry = manifest_entry(form)
            entry["results"] = {"outputs": [], "error": error}
            if error:
                failed.append((form.name, error))
            rows.append((form.family, form.name, form.elements, None if error else "compiled"))
        else:
            results = {"outputs": []}
            got = {}
            for mode, run_form in (("native", runner.native), ("ptx", runner.from_ptx)):
                try:
                    outputs = run_form(form)
                    if outputs is None:
                        results[f"{mode}_error"] = "not applicable: an sm_90a form runs from its PTX only"
                        continue
                    got[mode] = outputs
                    for name, value in got[mode].items():
                        arrays[f"{form.name}__{mode}__{name}"] = value
                    results["outputs"].append(mode)
                except Exception as error:  # noqa: BLE001
                    results[f"{mode}_error"] = f"{type(error).__name__}: {error}"[:600]
            native, ptx_out = got.get("native"), got.get("ptx")
            if native is not None and ptx_out is not None:
                results["bit_equal_native_ptx"] = bit_equal_rate(native, ptx_out)
                # lossless: a native buffer bit-equal to the PTX run's is not stored twice
                same = [name for name in native if np.array_equal(native[name].view(np.uint8),
                                                                   ptx_out[name].view(np.uint8))]
                for name in same:
                    del arrays[f"{form.name}__native__{name}"]
                if same:
                    results["native_same_as_ptx"] = same
            if len(results["outputs"]) < (1 if form.arch.endswith("a") else 2):
                failed.append((form.name, results.get("ptx_error") or results.get("native_error")))
                if any(mark in str(results.get(key, "")) for key in ("native_error", "ptx_error")
                       for mark in CONTEXT_LOST):
                    lost = form.name
            entry = manifest_entry(form)
            entry["results"] = results
            shown = "ran (PTX only)" if form.arch.endswith("a") and "ptx" in results["outputs"] else None
            rows.append((form.family, form.name, form.elements, results.get("bit_equal_native_ptx", shown)))
        entries.append(entry)
    meta = {
        "what": "Golden data of the PTX emulator (issue 26): one micro-kernel per opcode form; see "
                "docs/emulator-golden.md",
        "kind": "dry-run" if args.dry_run else "gpu",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": f"{Path(sys.executable).name} benchmarks/emulator_golden.py "
                   + " ".join(argv if argv is not None else sys.argv[1:]),
        "device": runner.device if runner else None,
        "seed": SEED,
        "seconds": round(time.monotonic() - started, 1),
        "forms": entries,
    }
    np.savez_compressed(out / "data.npz", **arrays)
    (out / "manifest.json").write_text(json.dumps(meta, indent=1) + "\n")
    families = {}
    for family, name, elements, value in rows:
        families.setdefault(family, [0, 0])
        families[family][0] += 1
        families[family][1] += value is not None
        shown = value if isinstance(value, str) or value is None else f"{100 * value:6.2f} %"
        print(f"{family:9s} {name:58s} {elements:6d}  {shown if shown is not None else 'FAILED'}")
    print("\nfamily     forms  ok")
    for family, (count, ok) in families.items():
        print(f"{family:9s} {count:6d} {ok:3d}")
    print(f"{len(forms)} forms, {len(failed)} failed, {time.monotonic() - started:.1f} s; wrote {out}")
    for name, why in failed:
        print(f"FAILED {name}: {str(why)[:300]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
