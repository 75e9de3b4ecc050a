"""Compiling a kernel's instructions into Python closures over NumPy lane arrays.

Each opcode has one builder, registered with :func:`opcode`; a builder gets the :class:`Instruction` and the
:class:`Compiler` and returns an :class:`Op`.  A builder that meets a modifier or operand it does not know
raises :class:`Unsupported`; the compiler then puts in its place an op that reports ``unsupported`` when (and
only when) a thread reaches it.  Adding a form is adding (or extending) one builder.  The machine builds each
instruction's op when a thread first reaches it (:meth:`Compiler.build`); :meth:`Compiler.compile` builds them all.

Registers are NumPy arrays of raw bits, one element per lane, as wide as their declaration (``.pred`` is bool);
an instruction reads them through views of its own type.  A closure takes the mask of the lanes that execute
(None: every live lane; it may then write every lane) and writes only those.

Cost: a closure's time is its NumPy calls (about a microsecond each on the lessons' few thousand lanes), so the
hot forms have closures with fewer and cheaper calls that give the same bits as the general path, and fall back
to it where they cannot tell: ``fma.rn.f32`` (:func:`ops_float.fma32_rn_canon`), the f32 tensor-core sum
(:func:`ops_tensor.accumulate_f32`: k-major products, every element decoded at once in ``gather``/``scatter``);
``rounding.nnz`` is ``np.count_nonzero`` without its Python wrapper.  Analyses of the whole kernel are kept on it
(:func:`derived`).
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

from .errors import Unsupported
from .ptx import TYPE_BITS, Instruction

PLAIN, BRANCH, EXIT, BARRIER, COLLECTIVE = range(5)

#: NumPy dtypes of the PTX types (f16/bf16 are kept as raw bits).
DTYPE = {
    "pred": np.bool_, "b8": np.uint8, "u8": np.uint8, "s8": np.int8, "b16": np.uint16, "u16": np.uint16,
    "s16": np.int16, "f16": np.float16, "bf16": np.uint16, "b32": np.uint32, "u32": np.uint32, "s32": np.int32,
    "f32": np.float32, "f16x2": np.uint32, "bf16x2": np.uint32, "b64": np.uint64, "u64": np.uint64,
    "s64": np.int64, "f64": np.float64,
}
UNSIGNED = {1: np.bool_, 8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
SIGNED = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}


def is_signed(t: str) -> bool:
    return t.startswith("s")


def is_float(t: str) -> bool:
    return t in ("f16", "f32", "f64", "bf16")


@dataclasses.dataclass
class Op:
    kind: int
    fn: object  # fn(mask) for PLAIN/EXIT/BARRIER; for BRANCH the guard; for COLLECTIVE see machine
    target: int = -1  # BRANCH: the instruction index of the label
    ready: object = None  # COLLECTIVE: ready(mask) -> lanes whose warps may execute now
    member: object = None  # COLLECTIVE: getter of the member mask
    ins: Instruction | None = None
    unsupported: bool = False  # the builder refused the form: the op reports it when reached


BUILDERS: dict = {}
#: The registry key of the builder of a mul.f32 + add.f32 pair run as one FMA (see :func:`contractions`).
CONTRACTED = "mul+add"


def opcode(*names, family=None):
    """Register a builder for the mnemonics ``names``; ``family`` "float", "half" or "int" where the same
    mnemonic has a builder per family (chosen by the instruction's last type: f32/f64 are "float",
    f16/bf16/f16x2/bf16x2 "half")."""
    def register(fn):
        for n in names:
            BUILDERS[(n, family)] = fn
        return fn
    return register


def family_of(ins: Instruction) -> str:
    for p in reversed(ins.parts):
        if p in TYPE_BITS:
            return "half" if p in ("f16", "bf16", "f16x2", "bf16x2") else "float" if p in ("f32", "f64") else "int"
    return "int"


def find_builder(ins: Instruction):
    return BUILDERS.get((ins.mnemonic, family_of(ins))) or BUILDERS.get((ins.mnemonic, None))


class Compiler:
    """Turns operands into getters and setters over the machine's register arrays."""

    def __init__(self, machine, kernel):
        self.m = machine
        self.kernel = kernel
        self._fused = None  # contractions(kernel), made on the first build

    # --- types ----------------------------------------------------------------------------------

    @staticmethod
    def type_of(ins: Instruction, allowed=None) -> str:
        """The last part of the opcode that is a type."""
        for p in reversed(ins.parts):
            if p in TYPE_BITS:
                if allowed is not None and p not in allowed:
                    raise Unsupported(f"type .{p}")
                return p
        raise Unsupported("no type")

    @staticmethod
    def types_of(ins: Instruction) -> list[str]:
        return [p for p in ins.parts[1:] if p in TYPE_BITS]

    # --- operands -------------------------------------------------------------------------------

    def register(self, name: str) -> np.ndarray:
        return self.m.register(name)

    def const(self, value, typ: str):
        """A 0-d array of ``typ`` from an integer (its bits) or float value."""
        bits = TYPE_BITS[typ]
        if typ == "pred":
            return np.bool_(bool(value))
        if isinstance(value, float):
            return np.array(value, dtype=DTYPE[typ])
        raw = np.array(int(value) & ((1 << bits) - 1), dtype=UNSIGNED[bits])
        return raw.view(DTYPE[typ])[()]

    def _reg(self, op):
        """Registers declared without ``%`` (inline assembly's ``.reg .pred p``) parse as symbols."""
        if op.kind == "sym" and op.value in self.kernel.registers:
            import dataclasses as dc
            return dc.replace(op, kind="reg")
        return op

    def src(self, op, typ: str):
        """A getter of operand ``op`` read as ``typ``: returns an array over the lanes or a NumPy scalar."""
        op = self._reg(op)
        dt = DTYPE[typ]
        bits = TYPE_BITS[typ]
        if op.kind == "reg":
            if op.value in self.m.special:
                arr = self.m.special[op.value]
                if bits == 32:
                    v = arr.view(dt)
                else:
                    v = arr.astype(UNSIGNED[bits]).view(dt)
                return lambda: v
            R = self.register(op.value)
            if typ == "pred" or R.dtype == np.bool_:
                if R.dtype != np.bool_ or typ != "pred":
                    raise Unsupported("predicate register used as a value")
                if op.neg:
                    return lambda: ~R
                return lambda: R
            rbits = R.dtype.itemsize * 8
            if rbits == bits:
                v = R.view(dt)
                return lambda: v
            if rbits > bits:  # the low bits
                u = UNSIGNED[bits]
                return lambda: R.astype(u).view(dt)
            # a narrower register: extend by the instruction's signedness
            if is_signed(typ):
                rs = R.view(SIGNED[rbits])
                return lambda: rs.astype(dt)
            u = UNSIGNED[bits]
            return lambda: R.astype(u).view(dt)
        if op.kind == "imm":
            if is_float(typ):
                c = np.array(float(op.value), dtype=dt)[()]
            else:
                c = self.const(op.value, typ)
            return lambda: c
        if op.kind == "fimm":
            if op.bits == 32:
                f = np.array(op.value, dtype=np.uint32).view(np.float32)[()]
            else:
                f = np.array(op.value, dtype=np.uint64).view(np.float64)[()]
            if is_float(typ):
                c = np.array(f, dtype=dt)[()]
            elif bits == op.bits:
                c = np.array(op.value, dtype=UNSIGNED[bits]).view(dt)[()]
            else:
                raise Unsupported(f"float literal {op.text} as .{typ}")
            return lambda: c
        if op.kind == "sym":
            address = self.m.symbol_address(op.value)
            c = self.const(address, typ)
            return lambda: c
        raise Unsupported(f"operand {op.text}")

    def dst(self, op, typ: str):
        """A setter ``set(value, mask)`` writing ``value`` (of ``typ``) into the register of ``op``."""
        op = self._reg(op)
        if op.kind == "sink":
            return lambda v, m: None
        if op.kind != "reg" or op.value in self.m.special:
            raise Unsupported(f"destination {op.text}")
        R = self.register(op.value)
        if typ == "pred":
            if R.dtype != np.bool_:
                raise Unsupported("predicate into a value register")

            def set_pred(v, m):
                if m is None:
                    R[...] = v
                else:
                    np.copyto(R, v, where=m)
            return set_pred
        bits = TYPE_BITS[typ]
        rbits = R.dtype.itemsize * 8
        dt = DTYPE[typ]
        if rbits == bits:
            Rt = R.view(dt)

            def set_same(v, m):  # a value already of the type: copied as it is (the bits are the same)
                if type(v) is not np.ndarray or v.dtype != dt:
                    v = np.asarray(v, dtype=dt)
                if m is None:
                    Rt[...] = v
                else:
                    np.copyto(Rt, v, where=m)
            return set_same
        elif rbits > bits:
            ext = SIGNED[bits] if is_signed(typ) else UNSIGNED[bits]

            def convert(v):
                return np.asarray(v, dtype=dt).view(ext).astype(SIGNED[rbits] if is_signed(typ) else R.dtype) \
                    .view(R.dtype)
        else:
            u = UNSIGNED[bits]

            def convert(v):
                return np.asarray(v, dtype=dt).view(u).astype(R.dtype)

        def set_value(v, m):
            v = convert(v)
            if m is None:
                R[...] = v
            else:
                np.copyto(R, v, where=m)
        return set_value

    def guard(self, ins: Instruction):
        """The guard predicate as a getter (None when the instruction has none)."""
        if ins.guard is None:
            return None
        R = self.register(ins.guard)
        if ins.guard_neg:
            return lambda: ~R
        return lambda: R

    # --- the program ------------------------------------------------------------------------------

    def compile(self) -> list[Op]:
        """Every instruction's op, and a final EXIT (falling off the end returns)."""
        return [self.build(i) for i in range(len(self.kernel.instructions))] + [Op(EXIT, None, ins=None)]

    def build(self, index: int) -> Op:
        """The op of instruction ``index`` (the machine builds each when a thread first reaches it)."""
        ins = self.kernel.instructions[index]
        fused = self._fused
        if fused is None:
            fused = self._fused = derived(self.kernel, "contractions", contractions) \
                if getattr(self.m, "contract", True) else {}
        try:
            if ins.index in fused:  # the builder is ops_float.build_contracted
                op = BUILDERS[(CONTRACTED, None)](ins, self, *fused[ins.index])
                op.ins = ins
                return op
            builder = find_builder(ins)
            if builder is None:
                raise Unsupported(f"opcode {ins.mnemonic}")
            op = builder(ins, self)
            op.ins = ins
            if op.kind == PLAIN and ins.guard is not None:
                op = Op(PLAIN, _guarded(op.fn, self.guard(ins), self.m), ins=ins)
            elif op.kind in (EXIT, BARRIER, COLLECTIVE) and ins.guard is not None:
                raise Unsupported("predicated control instruction")
        except Unsupported as e:
            op = Op(PLAIN, _unsupported(self.m, ins, str(e)), ins=ins, unsupported=True)
        return op


def derived(kernel, key, make):
    """``make(kernel)``, kept on the kernel for the next launch (a parsed kernel never changes; launch keeps the
    last modules' kernels: the per-launch analyses of an 8000-instruction kernel cost tens of milliseconds)."""
    cache = kernel.__dict__.setdefault("_derived", {})
    if key not in cache:
        cache[key] = make(kernel)
    return cache[key]


def _guarded(fn, pred, machine):
    def run(m):
        p = pred()
        fn((p & machine.alive) if m is None else (m & p))  # never the padding lanes or exited threads
    return run


def _unsupported(machine, ins, why):
    def run(m):
        machine.unsupported(ins, why, m)
    return run


_REG_NAME = re.compile(r"%[A-Za-z_][\w.]*|\b[A-Za-z_]\w*\b")


def _reads(ins: Instruction) -> list[str]:
    """Names of the registers an instruction reads (its destination excluded)."""
    operands = ins.operands if ins.mnemonic in ("st", "atom", "red") else ins.operands[1:]
    names = [n for o in operands for n in _REG_NAME.findall(o.text)]
    if ins.mnemonic in ("atom",):
        names += _REG_NAME.findall(ins.operands[0].text) if ins.operands else []
    if ins.guard:
        names.append(ins.guard)
    return names


def _writes(ins: Instruction) -> list[str]:
    if not ins.operands or ins.mnemonic in ("st", "red", "bra", "bar", "barrier"):
        return []
    d = ins.operands[0]
    items = d.items if d.kind == "vec" else (d,)
    out = [i.value for i in items if i.kind in ("reg", "sym")]
    if d.pair is not None:
        out.append(d.pair.value)
    return out


#: Operand kinds that name a register: "%f1", or a name without "%" declared in an inline-asm scope ("t").
_REGISTER = ("reg", "sym")


def contractions(kernel) -> dict:
    """Where ptxas would contract a ``mul.f32`` and the ``add.f32`` / ``sub.f32`` that alone uses its result
    into one FMA (it does, measured on the H200: in every case of the lessons' PTX, and in all 512 elements of the
    golden form, an inline-asm block whose product sits in a scoped register ``t``): index of the add ->
    (a, b, c, negate_product, negate_c), for the add to compute fma(±a, b, ±c).  Only unguarded
    instructions without rounding modifiers, in one basic block, with a and b unchanged in between."""
    ins_list = kernel.instructions
    starts = set(kernel.labels.values())
    reads: dict = {}
    for ins in ins_list:
        for n in _reads(ins):
            reads[n] = reads.get(n, 0) + 1
    out = {}
    for i, mul in enumerate(ins_list):
        if mul.opcode != "mul.f32" or mul.guard is not None or len(mul.operands) != 3:
            continue
        d, a, b = mul.operands
        if d.kind not in _REGISTER or reads.get(d.value, 0) != 1:
            continue
        for j in range(i + 1, min(i + 64, len(ins_list))):
            nxt = ins_list[j]
            if j in starts or nxt.mnemonic in ("bra", "ret", "exit", "bar", "barrier"):
                break
            if d.value in _reads(nxt):
                if nxt.opcode in ("add.f32", "sub.f32") and nxt.guard is None and len(nxt.operands) == 3:
                    x, y = nxt.operands[1], nxt.operands[2]
                    if x.kind in _REGISTER and x.value == d.value and not (y.kind in _REGISTER and y.value == d.value):
                        out[j] = (a, b, y, False, nxt.opcode == "sub.f32")
                    elif y.kind in _REGISTER and y.value == d.value:
                        out[j] = (a, b, x, nxt.opcode == "sub.f32", False)
                break
            written = _writes(nxt)
            if any(o.kind in _REGISTER and o.value in written for o in (a, b)) or d.value in written:
                break
    return out
