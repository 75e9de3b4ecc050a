"""Memory instructions: ld, st (.param .global .shared .local and generic; .v2 .v4; cache hints ignored), atom and
red (global, shared, generic: add min max exch cas and or xor inc dec; f32/f64 add; add.noftz of f16, f16x2,
bf16, bf16x2).

Atomics run in lane order: lanes hitting one address are applied one after another, lowest lane first (the GPU's
order is unspecified, so float atomic sums can differ from the GPU's in the last bits)."""
from __future__ import annotations

import numpy as np

from .errors import Unsupported
from .ops_half import HALF_TYPES, add_words
from .program import DTYPE, PLAIN, SIGNED, UNSIGNED, Op, is_signed, opcode
from .ptx import TYPE_BITS
from .rounding import ftz32

_SPACES = ("param", "global", "shared", "local", "const")
_IGNORED = {"weak", "volatile", "relaxed", "acquire", "release", "acq_rel", "sys", "gpu", "cta", "cluster", "nc",
            "ca", "cg", "cs", "lu", "cv", "wb", "wt", "L1::no_allocate", "L1::evict_last", "L1::evict_first",
            "L1::evict_normal", "L1::evict_unchanged", "L2::evict_last", "L2::evict_first", "L2::evict_normal",
            "L2::64B", "L2::128B", "L2::256B", "L2::cache_hint", "aligned", "sync"}


def _form(ins):
    parts = ins.parts[1:]
    space = next((p for p in parts if p in _SPACES), "generic")
    vec = next((int(p[1:]) for p in parts if p in ("v2", "v4", "v8")), 1)
    t = next((p for p in reversed(parts) if p in TYPE_BITS), None)
    if t is None:
        raise Unsupported("no type")
    extra = [p for p in parts if p not in _SPACES and p not in ("v2", "v4", "v8") and p not in TYPE_BITS
             and p not in _IGNORED and not p.startswith("L2::")]
    if space == "const":
        raise Unsupported(".const memory")
    return space, vec, t, extra


def _address(c, op):
    """A getter of the per-lane address of an [addr] operand, as uint64 (or int for .param)."""
    if op.kind != "addr":
        raise Unsupported(f"address {op.text}")
    base = c._reg(op.base) if op.base is not None else None
    off = np.uint64(op.offset & 0xFFFFFFFFFFFFFFFF)
    if base is None:
        return lambda: off
    if base.kind == "sym":
        a = np.uint64((c.m.symbol_address(base.value) + op.offset) & 0xFFFFFFFFFFFFFFFF)
        return lambda: a
    if base.kind != "reg":
        raise Unsupported(f"address {op.text}")
    R = c.register(base.value)
    if R.dtype == np.uint64:
        if op.offset == 0:
            return lambda: R
        return lambda: R + off
    if R.dtype == np.uint32:
        o = np.int64(op.offset)
        return lambda: R.astype(np.int64) + o
    raise Unsupported(f"address register {base.value}")


def _setter_at(c, op, t):
    """set(raw_bits_of_t, idx): write loaded raw bits into the register of ``op`` at lanes ``idx``."""
    if op.kind == "sink":
        return lambda v, idx: None
    op = c._reg(op)
    if op.kind != "reg":
        raise Unsupported(f"destination {op.text}")
    R = c.register(op.value)
    if R.dtype == np.bool_:
        raise Unsupported("load into a predicate")
    bits = TYPE_BITS[t]
    rbits = R.dtype.itemsize * 8
    if rbits < bits:
        raise Unsupported(f"load of .{t} into a {rbits}-bit register")
    if rbits == bits or not is_signed(t):
        def set_(v, idx):
            R[idx] = v
    else:
        s, w = SIGNED[bits], SIGNED[rbits]

        def set_(v, idx):
            R[idx] = v.view(s).astype(w).view(R.dtype)
    return set_


def _getter_raw(c, op, t):
    """Raw bits (UNSIGNED of t's width) of a value operand for lanes idx."""
    bits = TYPE_BITS[t]
    u = UNSIGNED[bits]
    g = c.src(op, t)

    def get(idx):
        v = np.asarray(g())
        if v.ndim == 0:
            return np.full(len(idx), v.view(u) if v.dtype.itemsize * 8 == bits else v.astype(u), dtype=u)
        return v[idx].view(u)
    return get


def _lanes(machine, m):
    return machine.lanes_of(m)


#: The index of every lane (a setter's ``R[idx] = v`` writes the whole register).
_EVERY = slice(None)


def _select(addr, idx):
    a = np.asarray(addr)
    return a if a.ndim == 0 else a[idx]


@opcode("ld", "ldu")
def build_ld(ins, c):
    space, vec, t, extra = _form(ins)
    if extra:
        raise Unsupported("modifier " + ", ".join("." + e for e in extra))
    size = max(TYPE_BITS[t] // 8, 1)
    dst = ins.operands[0]
    items = dst.items if dst.kind == "vec" else (dst,)
    if len(items) != vec:
        raise Unsupported("vector length")
    machine = c.m
    if space == "param":  # kernel parameters: the same value for every lane
        a = ins.operands[1]
        if a.kind != "addr" or a.base is None or a.base.kind != "sym":
            raise Unsupported("ld.param through a register")
        base = machine.symbol_address(a.base.value) + a.offset
        consts = [c.const(machine.param_value(base + k * size, size), t) for k in range(vec)]
        sets = [c.dst(item, t) for item in items]
        return Op(PLAIN, lambda m: [s(v, m) for s, v in zip(sets, consts)] and None)
    addr = _address(c, ins.operands[1])
    sets = [_setter_at(c, item, t) for item in items]

    lanes_of, access, L = machine.lanes_of, machine.access, machine.L
    index, batchable = ins.index, space == "shared"

    def run(m):
        idx = lanes_of(m)
        n = len(idx)
        if n == 0:
            return
        a = addr()
        if n < L and a.ndim:  # (every lane: idx is all of them, in order; access only reads the addresses)
            a = a[idx]
        batch = machine._batch
        if batchable and batch is not None and idx is batch.idx and index in batch.rows and a.ndim:
            # access's own first step for a batched shared load (Machine._batch_reads), without its preamble
            vals = machine._batched_read(batch, ins, np.asarray(a, dtype=np.int64))
            if vals is None:
                vals = access(space, idx, a, size, vec, ins)
        else:
            vals = access(space, idx, a, size, vec, ins)
        if n == L:
            idx = _EVERY
        for k, s in enumerate(sets):
            s(vals[k], idx)
    return Op(PLAIN, run)


@opcode("st")
def build_st(ins, c):
    space, vec, t, extra = _form(ins)
    if extra:
        raise Unsupported("modifier " + ", ".join("." + e for e in extra))
    if space == "param":
        raise Unsupported("st.param")
    size = max(TYPE_BITS[t] // 8, 1)
    src = ins.operands[1]
    items = src.items if src.kind == "vec" else (src,)
    if len(items) != vec:
        raise Unsupported("vector length")
    addr = _address(c, ins.operands[0])
    gets = [_getter_raw(c, item, t) for item in items]
    machine = c.m

    def run(m):
        idx = _lanes(machine, m)
        if len(idx) == 0:
            return
        values = np.stack([g(idx) for g in gets])
        machine.access(space, idx, _select(addr(), idx), size, vec, ins, write=True, values=values)
    return Op(PLAIN, run)


# --- atomics ----------------------------------------------------------------------------------------

def _apply(op, t, old, b, cval):
    dt = DTYPE[t]
    if t in HALF_TYPES:  # add.noftz of raw words
        bits = UNSIGNED[TYPE_BITS[t]]
        return add_words(old.view(bits), b.view(bits), t).astype(bits).view(dt)
    if op == "add":
        return np.add(old, b, dtype=dt)
    if op == "min":
        return np.fmin(old, b) if t in ("f32", "f64") else np.minimum(old, b)
    if op == "max":
        return np.fmax(old, b) if t in ("f32", "f64") else np.maximum(old, b)
    if op == "exch":
        return b
    if op == "cas":
        return np.where(old == b, cval, old)
    if op == "and":
        return old & b
    if op == "or":
        return old | b
    if op == "xor":
        return old ^ b
    if op == "inc":
        return np.where(old >= b, np.zeros((), dt), np.add(old, np.ones((), dt), dtype=dt))
    if op == "dec":
        return np.where((old == 0) | (old > b), b, np.subtract(old, np.ones((), dt), dtype=dt))
    raise Unsupported(f"atom.{op}")


_ATOM_OPS = ("add", "min", "max", "exch", "cas", "and", "or", "xor", "inc", "dec")


def _atomic(ins, c, returns):
    parts = ins.parts[1:]
    space = next((p for p in parts if p in ("global", "shared")), "generic")
    op = next((p for p in parts if p in _ATOM_OPS), None)
    t = next((p for p in reversed(parts) if p in TYPE_BITS), None)
    half = t in HALF_TYPES
    extra = [p for p in parts if p not in _ATOM_OPS and p not in TYPE_BITS and p not in _IGNORED
             and p not in ("global", "shared") and not (half and p == "noftz")]
    if op is None or t is None or extra or (half and (op != "add" or "noftz" not in parts)):
        raise Unsupported("form")
    if t in ("f32", "f64") and op not in ("add", "exch", "min", "max"):
        raise Unsupported(f"atom.{op}.{t}")
    size = TYPE_BITS[t] // 8
    dt = DTYPE[t]
    u = UNSIGNED[size * 8]
    ops = ins.operands
    k = 1 if returns else 0
    addr = _address(c, ops[k])
    b = _getter_raw(c, ops[k + 1], t)
    cv = _getter_raw(c, ops[k + 2], t) if op == "cas" else None
    set_old = _setter_at(c, ops[0], t) if returns else None
    machine = c.m
    # global atom.add.f32 flushes subnormals (H200, PTX ISA); shared memory keeps them (H200); generic: not measured
    flush = op == "add" and t == "f32" and space == "global"

    def run(m):
        idx = _lanes(machine, m)
        if len(idx) == 0:
            return
        a = np.asarray(_select(addr(), idx))
        if a.ndim == 0:
            a = np.full(len(idx), a)
        bv = b(idx).view(dt)
        cvv = cv(idx).view(dt) if cv is not None else None
        old_all = np.zeros(len(idx), dtype=u)
        # rounds: each round takes the first not-yet-done lane of every address (in lane order)
        order = np.argsort(a, kind="stable")
        sa = a[order]
        first = np.ones(len(sa), dtype=bool)
        first[1:] = sa[1:] != sa[:-1]
        group_start = np.maximum.accumulate(np.where(first, np.arange(len(sa)), 0))
        rank = np.arange(len(sa)) - group_start
        rounds = int(rank.max()) + 1 if len(rank) else 0
        if op == "add" and t not in ("f32", "f64") + HALF_TYPES and rounds > 1:
            # integer adds commute: old = base + the sum of the earlier lanes' operands (mod 2**n)
            base = machine.atomic_io(space, idx[order][first], sa[first], size, ins)
            vals = bv[order].astype(dt)
            csum = np.cumsum(vals, dtype=dt)
            start_sum = np.where(first, 0, 0).astype(dt)
            gstart_cum = (csum - vals)[group_start]
            before = np.subtract(csum - vals, gstart_cum, dtype=dt)
            base_each = np.repeat(base.view(dt), np.diff(np.append(np.flatnonzero(first), len(sa))))
            old_sorted = np.add(base_each, before, dtype=dt)
            final = np.add(base_each, np.subtract(csum, gstart_cum, dtype=dt), dtype=dt)
            last = np.append(np.flatnonzero(first)[1:] - 1, len(sa) - 1)
            machine.atomic_io(space, idx[order][first], sa[first], size, ins, final[last].view(u))
            old_all[order] = old_sorted.view(u)
            del start_sum
        elif op in ("cas", "exch") and rounds > 1:
            _sequential_cas_exch(machine, space, op, idx, order, sa, first, group_start, bv, cvv, size, ins, dt, u,
                                 old_all)
        else:
            for r in range(rounds):
                sel = order[rank == r]
                old = machine.atomic_io(space, idx[sel], a[sel], size, ins)
                if flush:  # atom.add.f32 in global memory flushes subnormal inputs and results (H200; PTX ISA)
                    new = ftz32(np.add(ftz32(old.view(dt)), ftz32(bv[sel]), dtype=dt))
                else:
                    new = _apply(op, t, old.view(dt), bv[sel], cvv[sel] if cvv is not None else None)
                machine.atomic_io(space, idx[sel], a[sel], size, ins, np.asarray(new, dtype=dt).view(u))
                old_all[sel] = old
        if set_old is not None:
            set_old(old_all, idx)
    return Op(PLAIN, run)


def _sequential_cas_exch(machine, space, op, idx, order, sa, first, group_start, bv, cvv, size, ins, dt, u, old_all):
    """cas and exch of many lanes on few addresses, in lane order, without a round per lane.

    exch: each lane gets the value the lane before it swapped in.  cas: per address, the lanes before the next
    lane whose compare value matches the current value all read it unchanged; that lane swaps; repeat (one pass
    per successful swap, usually one per instruction in a CAS loop)."""
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], len(sa))
    base = machine.atomic_io(space, idx[order][starts], sa[starts], size, ins).view(dt)
    b_sorted = bv[order]
    old_sorted = np.empty(len(sa), dtype=dt)
    if op == "exch":
        prev = np.empty(len(sa), dtype=dt)
        prev[1:] = b_sorted[:-1]
        prev[starts] = base
        old_sorted = prev
        final = b_sorted[ends - 1]
    else:
        c_sorted = cvv[order]
        group = np.repeat(np.arange(len(starts)), ends - starts)
        cur = base.copy()
        pos = starts.copy()  # the first lane of each group not yet done
        active = pos < ends
        while active.any():
            g_act = np.flatnonzero(active)
            # lanes of active groups from pos on: does their compare value match the group's current value?
            lane_pos = np.arange(len(sa))
            todo = (lane_pos >= pos[group]) & active[group]
            match = todo & (b_sorted == cur[group])
            # the first match per group (len(sa) where none)
            firsts = np.full(len(starts), len(sa))
            mi = np.flatnonzero(match)
            np.minimum.at(firsts, group[mi], mi)
            stop = np.minimum(firsts, ends)
            read_cur = todo & (lane_pos <= stop[group]) & (lane_pos < ends[group])
            old_sorted[read_cur] = cur[group[read_cur]]
            hit = g_act[firsts[g_act] < ends[g_act]]
            cur[hit] = c_sorted[firsts[hit]]
            pos = np.where(active, stop + 1, pos)
            active = active & (firsts < ends) & (pos < ends)
        final = cur
    machine.atomic_io(space, idx[order][starts], sa[starts], size, ins, np.asarray(final, dtype=dt).view(u))
    old_all[order] = old_sorted.view(u)


@opcode("atom")
def build_atom(ins, c):
    return _atomic(ins, c, True)


@opcode("red")
def build_red(ins, c):
    return _atomic(ins, c, False)
