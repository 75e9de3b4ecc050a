"""Fused segments: a stretch of a straight run made only of f32 arithmetic (``mul``/``add``/``sub``/``fma.rn.f32``,
round to nearest, no ``.ftz``/``.sat``) and ``ld.shared.f32`` through ``[register+offset]``, evaluated a level of its
data flow at a time instead of an instruction at a time.

Why: an issue costs a handful of NumPy calls over the lanes, nearly all of it call overhead.  Lesson 08's unrolled
loops (``s += q[t] * Ks[j * D + t]``: a load and an FMA per ``t``; ``o[t] = o[t] * alpha + p * Vs[j * D + t]``: a
load, a mul and an FMA) are long straight stretches of such instructions; evaluated level by level, the 128
independent loads, muls and FMAs of a level are one NumPy call each, and a dependent chain of FMAs costs three calls
a step (the exact float64 products of all its steps are one call).

Exactness (the rule this module keeps): a segment either produces, for every lane that executes, the very bits and
the very bookkeeping the instruction-by-instruction closures would, or it does nothing and says so (``run`` returns
False; the machine then runs the closures).  So:

* every value is computed by the same elementwise operation as the closure's (float32 ``*``, ``+``, ``-`` and the
  canonical NaN; an FMA is the exact float64 product plus the addend, rounded to float32 once), over the same lanes;
* an FMA's float64 sum is only rounded to float32 directly where that is what ``ops_float.fma32_rn_canon`` does:
  a lane on a float32 rounding midpoint, a non-zero sum below 1.2e-38, or a NaN sum anywhere makes the whole
  segment fall back (before anything is written);
* the loads are checked all at once as ``access`` checks each (in bounds, aligned, every granule written, no
  write of the current epoch: nothing to report), else the segment falls back, and each load queues its read for the
  readers' summary (``SharedMemory.note_read``) as the closure does, in program order; the loaded registers get the
  loaded bits only at the executing lanes;
* results are written to the registers, in program order of their last writer, at the executing lanes only (every
  lane where the group is every live lane, as the closures do); a register whose every read in the kernel is a later
  instruction of the same segment (no label in between) is not written at all: nothing can read it.

The machine uses a segment only where its straight run executes whole (not cut by another group's pc or the issue
budget), so the issue count, the FLOP count and the current instruction are those of the closures.  ``launch(...,
fuse=False)`` runs without segments (the tests compare both).
"""
from __future__ import annotations

import numpy as np

from .memory import MAX_QUEUED
from .program import _reads
from .rounding import canon32, nnz

_F32, _F64, _U32, _U64, _I64 = np.float32, np.float64, np.uint32, np.uint64, np.int64
_LOW29 = np.uint64(0x1FFFFFFF)
_TIE = np.uint64(0x10000000)
_TINY = 1.2e-38  # ops_float.fma32_rn_canon's bound for the sums that need the exact path
#: The fewest instructions worth a segment.
MIN_SEGMENT = 16
#: Instructions x lanes a segment holds at most (its float64 arrays are about that many elements).
MAX_ELEMENTS = 1 << 22


# --- the static plan (of the kernel alone) ---------------------------------------------------------------------

def _f32_reg(kernel, op):
    return op.kind == "reg" and kernel.registers.get(op.value) == "f32"


def _source(kernel, op):
    """('reg', name) or ('imm', operand) of an f32 source operand, None where a segment does not take it."""
    if _f32_reg(kernel, op):
        return ("reg", op.value)
    if op.kind == "fimm" and op.bits == 32:
        return ("imm", op)
    return None


def _classify(kernel, ins, contracted):
    """(kind, destination register, sources) of an instruction a segment takes, else None."""
    if ins.guard is not None or ins.index in contracted:
        return None
    p, ops = ins.parts, ins.operands
    if p[0] in ("mul", "add", "sub") and p[1:] in (("f32",), ("rn", "f32")) and len(ops) == 3:
        kind = p[0]
    elif p[0] == "fma" and p[1:] == ("rn", "f32") and len(ops) == 4:
        kind = "fma"
    elif p == ("ld", "shared", "f32") and len(ops) == 2:
        d, a = ops
        if not _f32_reg(kernel, d) or a.kind != "addr" or a.base is None or a.base.kind != "reg" \
                or kernel.registers.get(a.base.value) not in ("u32", "b32", "s32", "u64", "b64", "s64"):
            return None
        return ("ld", d.value, (a.base.value, a.offset))
    else:
        return None
    if not _f32_reg(kernel, ops[0]):
        return None
    srcs = [_source(kernel, o) for o in ops[1:]]
    if any(s is None for s in srcs) or all(s[0] == "imm" for s in srcs):
        return None
    return (kind, ops[0].value, srcs)


def _read_counts(kernel):
    counts: dict = {}
    for ins in kernel.instructions:
        for n in _reads(ins):
            counts[n] = counts.get(n, 0) + 1
    return counts


class Plan:
    """The data flow of one segment: micro-operations (``ld``, ``mul``, ``add``, ``sub``; an FMA is a ``prod``, the
    exact float64 product, and a ``sum``), grouped by level and kind; the registers to write at the end."""

    def __init__(self, kernel, entries, first, read_counts):
        self.first, self.count = first, len(entries)
        ops = []  # [kind, inputs, level]; inputs: ('reg', name) | ('imm', operand) | ('op', id)
        writer: dict = {}  # register -> the op that last wrote it in the segment
        reads_inside: dict = {}  # register -> reads of it inside the segment served by a write before them
        self.loads = []  # (op id, instruction index, base register, offset)
        results = []  # (register, op id) per instruction, in program order

        def ref(src):
            if src[0] == "reg" and src[1] in writer:
                reads_inside[src[1]] = reads_inside.get(src[1], 0) + 1
                return ("op", writer[src[1]])
            return src

        def level(inputs):
            return 1 + max([ops[i[1]][2] for i in inputs if i[0] == "op"] + [0])

        for k, (kind, dst, srcs) in enumerate(entries):
            if kind == "ld":
                base, offset = srcs
                if base in writer:
                    raise ValueError("a load through a register written in the segment")
                ops.append(["ld", [], 0])
                self.loads.append((len(ops) - 1, first + k, base, offset))
            elif kind == "fma":
                a, b, c = (ref(s) for s in srcs)
                ops.append(["prod", [a, b], level([a, b])])
                ops.append(["sum", [("op", len(ops) - 1), c], level([("op", len(ops) - 1), c])])
            else:
                inputs = [ref(s) for s in srcs]
                ops.append([kind, inputs, level(inputs)])
            writer[dst] = len(ops) - 1
            results.append((dst, len(ops) - 1))
        # Groups: by level, then kind (loads are one group per base register), members in program order.
        keys: dict = {}
        for i, (kind, inputs, lev) in enumerate(ops):
            if kind == "ld":
                continue
            keys.setdefault((lev, kind), []).append(i)
        self.groups = [(kind, members) for (lev, kind), members in sorted(keys.items(), key=lambda kv: kv[0][0])]
        self.ops = ops
        # Registers to write: each one's last writer, unless every read of it in the kernel is served inside.
        last = {}
        for dst, i in results:
            last[dst] = i
        self.commits = [(dst, i) for dst, i in last.items() if reads_inside.get(dst, 0) != read_counts.get(dst, 0)]
        self.nsum = sum(1 for o in ops if o[0] == "sum")


def plan_run(kernel, contracted, start, end):
    """The segments of the straight run ``start .. end - 1``: a list of (first, count, Plan or None) covering it
    in order (None: run by the closures)."""
    labels = set(kernel.labels.values())
    read_counts = kernel.__dict__.setdefault("_derived", {}).get("fusion_reads")
    if read_counts is None:
        read_counts = kernel.__dict__["_derived"]["fusion_reads"] = _read_counts(kernel)
    out = []
    j = start
    instructions = kernel.instructions
    while j < end:
        entries = []
        k = j
        while k < end and (k == j or k not in labels):
            e = _classify(kernel, instructions[k], contracted)
            if e is None:
                break
            entries.append(e)
            k += 1
        if len(entries) >= MIN_SEGMENT:
            try:
                out.append((j, len(entries), Plan(kernel, entries, j, read_counts)))
            except ValueError:
                out.append((j, len(entries), None))
            j = k
        else:
            n = max(len(entries), 1)
            if out and out[-1][2] is None:
                out[-1] = (out[-1][0], out[-1][1] + n, None)
            else:
                out.append((j, n, None))
            j += n
    return out


# --- a segment bound to a machine ------------------------------------------------------------------------------

class Segment:
    """A :class:`Plan` over one machine's registers; :meth:`run` evaluates it or returns False untouched."""

    def __init__(self, machine, compiler, plan: Plan):
        self.m = machine
        self.plan = plan
        self.count = plan.count
        L = machine.L
        self.L = L
        views: dict = {}

        def view(name):
            v = views.get(name)
            if v is None:
                v = views[name] = machine.register(name).view(_F32)
            return v

        # Where each op's value lives: ('g', group, row, group size) or ('ld', row).
        where: dict = {}
        for row, (i, _, _, _) in enumerate(plan.loads):
            where[i] = ("ld", row)
        for g, (kind, members) in enumerate(plan.groups):
            for row, i in enumerate(members):
                where[i] = ("g", g, row, len(members))
        self.where = where
        # Loads: their base registers' lanes as int64 offsets (as ops_memory._address), offsets, pcs, destinations.
        self.nload = len(plan.loads)
        if self.nload:
            bases = {}
            for _, _, base, _ in plan.loads:
                bases.setdefault(base, machine.register(base))
            self.load_bases = [bases[b] for _, _, b, _ in plan.loads]
            self.same_base = len(bases) == 1
            self.load_offsets = np.array([o for _, _, _, o in plan.loads], dtype=_I64)[:, None]
            offsets = [o for _, _, _, o in plan.loads]
            self.off0 = offsets[0]
            self.dmin, self.dmax = min(offsets) - self.off0, max(offsets) - self.off0
            self.aligned_offsets = all((o - self.off0) % 4 == 0 for o in offsets)
            self.dgran = np.array([(o - self.off0) >> 2 for o in offsets], dtype=_I64)[:, None]
            # a block's lanes are contiguous (each block padded to whole warps): block-uniform reads can be seen
            self.uniform_check = machine.L % machine.Tp == 0
            self.load_pcs = [pc for _, pc, _, _ in plan.loads]
            self.load_regs = [view(machine_name) for machine_name in
                              (compiler.kernel.instructions[pc].operands[0].value for pc in self.load_pcs)]
        # Inputs of each group, position by position: a getter over the environment.
        consts: dict = {}

        def const(op, dtype):
            key = (op.text, dtype)
            if key not in consts:
                consts[key] = dtype(compiler.src(op, "f32")())
            return consts[key]

        wide = {g for g, (kind, _) in enumerate(plan.groups) if kind == "prod"}  # groups of float64 values

        def getter(refs, dtype):
            """A function env -> an array broadcastable to (len(refs), L) of the refs' values, as ``dtype``."""
            first = refs[0]
            if all(r == first for r in refs):
                if first[0] == "reg":
                    v = view(first[1])
                    return (lambda env: v) if dtype is _F32 else (lambda env: v.astype(_F64))
                if first[0] == "imm":
                    c = const(first[1], dtype)
                    return lambda env: c
                w = where[first[1]]
                g, r = (-1, w[1]) if w[0] == "ld" else (w[1], w[2])
                if dtype is _F32 or g in wide:
                    return lambda env: env[g][r]
                return lambda env: env[g][r].astype(_F64)
            ws = [where.get(r[1]) if r[0] == "op" else None for r in refs]
            if all(w is not None for w in ws):
                key = ws[0][1] if ws[0][0] == "g" else -1
                rows = [w[2] if w[0] == "g" else w[1] for w in ws]
                if all((w[1] if w[0] == "g" else -1) == key for w in ws) and rows == list(range(rows[0], rows[0] + len(rows))):
                    a, b = rows[0], rows[0] + len(rows)
                    if dtype is _F32 or key in wide:
                        return lambda env: env[key][a:b]
                    return lambda env: env[key][a:b].astype(_F64)
            items = []
            for r in refs:
                if r[0] == "reg":
                    v = view(r[1])
                    items.append(lambda env, v=v: v)
                elif r[0] == "imm":
                    c = np.full(L, const(r[1], _F32), dtype=_F32)
                    items.append(lambda env, c=c: c)
                else:
                    w = where[r[1]]
                    if w[0] == "ld":
                        items.append(lambda env, r=w[1]: env[-1][r])
                    else:  # (a float64 product only ever feeds a sum: concatenated as float64, exactly)
                        items.append(lambda env, g=w[1], r=w[2]: env[g][r])
            n = len(refs)
            if dtype is _F32:
                return lambda env: np.concatenate([f(env) for f in items]).reshape(n, L)
            return lambda env: np.concatenate([f(env) for f in items]).reshape(n, L).astype(_F64)

        self.sums = np.empty((max(plan.nsum, 1), L), dtype=_F64)
        self.sum_inputs = []  # per sum step: (first row, end row, (rows, cols) -> (products, addends) of the last run)
        steps = []
        chains = _chains(plan)
        srow = 0
        for g, (kind, members) in enumerate(plan.groups):
            n = len(members)
            if kind == "sum" and g in chains:
                chain = chains[g]
                if chain is None:  # a later link of a chain: its step is the chain's
                    continue
                k = len(chain)
                prods = getter([plan.ops[plan.groups[h][1][0]][1][0] for h in chain], _F64)
                start = getter([plan.ops[members[0]][1][1]], _F64)
                out = self.sums[srow:srow + k]
                srow += k
                keep = [None, None, None]
                self.sum_inputs.append((srow - k, srow, _chain_inputs(keep)))
                steps.append(_chain_step(prods, start, out, chain, keep))
            elif kind == "sum":
                p = getter([plan.ops[i][1][0] for i in members], _F64)
                c = getter([plan.ops[i][1][1] for i in members], _F64)
                out = self.sums[srow:srow + n]
                srow += n
                keep = [None, None]
                self.sum_inputs.append((srow - n, srow, _group_inputs(keep)))
                steps.append(_sum_step(p, c, out, keep, g))
            else:
                a = getter([plan.ops[i][1][0] for i in members], _F64 if kind == "prod" else _F32)
                b = getter([plan.ops[i][1][1] for i in members], _F64 if kind == "prod" else _F32)
                steps.append(_binary_step(kind, a, b, n, L, g))
        self.steps = steps
        self.ngroups = len(plan.groups)
        self.checks_sums = plan.nsum > 0
        # Commits: (register's float32 view, getter of the value) in program order of the last writers.
        commits = []
        for dst, i in plan.commits:
            w = where[i]
            if w[0] == "ld":
                commits.append((view(dst), lambda env, r=w[1]: env[-1][r]))
            else:
                commits.append((view(dst), lambda env, g=w[1], r=w[2]: env[g][r]))
        self.commits = commits

    def run(self, mask) -> bool:
        """Evaluate the segment for the lanes of ``mask`` (None: every live lane), or return False having changed
        nothing."""
        try:
            env, note = self._evaluate(mask)
        except Exception:  # noqa: BLE001 - a case this module did not foresee: nothing is written, the closures run
            return False
        if env is None:
            return False
        if note is not None:
            note()
        if mask is None:
            for R, value in self.commits:
                R[...] = value(env)
        else:
            for R, value in self.commits:
                np.copyto(R, value(env), where=mask)
        return True

    def _evaluate(self, mask):
        """(the groups' values, the loads' read queueing or None), or (None, None) where the segment falls back."""
        m = self.m
        env = [None] * (self.ngroups + 1)
        note = None
        if self.nload:
            idx = m.lanes_of(mask)
            n = len(idx)
            if n == 0:
                return None, None
            loaded = self._load_checked(idx, n)
            if loaded is None:
                return None, None
            values, note = loaded
            env[-1] = values
        for step in self.steps:
            step(env)
        if self.checks_sums:
            s = self.sums
            a = np.abs(s)
            big = nnz(a >= _TINY)
            if big != s.size and big + nnz(a == 0) != s.size:
                return None, None
            boundary = (s.view(_U64) & _LOW29) == _TIE
            if nnz(boundary) and not self._midpoints_exact(boundary):
                return None, None
        return env, note

    def _uniform(self, block_first, first, ep, key, slot, sh, lane_ep=None):
        """_load_checked where each block's lanes read one address per load (``block_first``: each block's first
        granule): the same checks on one lane per block (a block's lanes share its epoch: ``ep`` of every lane of
        the chunk), the values spread over every lane; ``first``, ``lane_ep``, ``key`` and ``slot`` are those of
        the executing lanes (``lane_ep`` None: ``ep``)."""
        Tp = self.m.Tp
        bb = block_first + self.dgran  # (loads, blocks)
        w = sh.writer[bb]
        if nnz(w) < w.size or nnz(w >= ep[::Tp]):
            return None
        values = np.repeat(sh.data.view(_U32)[bb].view(_F32), Tp, axis=1)
        return values, self._noter(sh, first + self.dgran, ep if lane_ep is None else lane_ep, key, slot)

    def _noter(self, sh, b, ep, key, slot):
        """A function queueing the loads' reads for the readers' summary, in program order (as each load's
        ``SharedMemory.note_read``; the summary is brought up to date once, where the queue has grown too long)."""
        pcs = self.load_pcs
        n = b.shape[1]

        def note():
            sh.reads.extend([(b[k], ep, key, pc, slot) for k, pc in enumerate(pcs)])
            sh.queued += n * len(pcs)
            if sh.queued > MAX_QUEUED:
                sh.flush_reads()
        return note

    def _midpoints_exact(self, boundary) -> bool:
        """Whether every sum on a float32 rounding midpoint (``boundary``, over the sums) is exact (TwoSum's residual
        0), as ``ops_float.fma32_rn_canon`` asks before rounding such sums directly; computed at those sums only."""
        for r0, r1, inputs in self.sum_inputs:
            part = boundary[r0:r1]
            if not nnz(part):
                continue
            p, z = inputs(part)
            s = self.sums[r0:r1][part]
            bb = s - p
            if nnz((p - (s - bb)) + (z - bb)):
                return False
        return True

    def _load_checked(self, idx, n):
        """(values, a function queueing the reads) where every load is clean, else None (nothing queued): the
        checks of ``Machine.access`` (bounds, alignment, written granules, no write in this epoch: nothing to
        report), on the extremes of the lanes' base offsets where the loads share one base register."""
        m = self.m
        sh = m.shared
        if sh.g != 4 or m.uses_async or sh.size < 4:
            return None
        slot, slot_g, ep, key = m._lane_info(idx)
        if self.same_base:
            if not self.aligned_offsets:
                return None
            R = self.load_bases[0]
            base = R.astype(_I64) if R.dtype.itemsize < 8 else R.view(_I64)
            if n != self.L and self.uniform_check and len(m._alive_idx if m._alive_idx is not None else ()) == self.L:
                # some lanes of a full chunk: where every lane's address is its block's (a tile row), the checks of
                # every lane (more than needed: a failure only means the closures run) once per block
                full = base + self.off0
                if int(full.min()) + self.dmin >= 0 and int(full.max()) + self.dmax <= sh.size - 4 \
                        and not nnz(full & 3):
                    per_block = (m.slot * sh.gstride + (full >> 2)).reshape(-1, m.Tp)
                    if not nnz(per_block != per_block[:, :1]):
                        return self._uniform(per_block[:, 0], per_block.reshape(-1)[idx], m.lane_ep, key, slot, sh,
                                             ep)
            if n != self.L:
                base = base[idx]
            base = base + self.off0
            # every base + offset within [0, size - 4] (Python integers: no wrap-around), and 4-byte aligned
            if int(base.min()) + self.dmin < 0 or int(base.max()) + self.dmax > sh.size - 4 or nnz(base & 3):
                return None
            first = slot_g + (base >> 2)
            if n == self.L and self.uniform_check:
                # every block's lanes at one address (a row of a tile, read by the whole block): checked and read
                # once per block, spread over its lanes
                per_block = first.reshape(-1, m.Tp)
                if not nnz(per_block != per_block[:, :1]):
                    return self._uniform(per_block[:, 0], first, ep, key, slot, sh)
            b = first + self.dgran
        else:
            rows = [(R.astype(_I64) if R.dtype.itemsize < 8 else R.view(_I64)) for R in self.load_bases]
            offs = np.concatenate(rows).reshape(self.nload, self.L) + self.load_offsets
            if n != self.L:
                offs = offs[:, idx]
            if nnz(offs.view(_U64) > _U64(sh.size - 4)) or nnz(offs & 3):
                return None
            b = slot_g + (offs >> 2)
        w = sh.writer[b]
        if nnz(w) < w.size or nnz(w >= ep):
            return None
        values = sh.data.view(_U32)[b].view(_F32)
        note = self._noter(sh, b, ep, key, slot)
        if n == self.L:
            return values, note
        full = np.concatenate(self.load_regs).reshape(self.nload, self.L)
        full[:, idx] = values
        return full, note


def _chains(plan):
    """Chains of one-FMA sum groups, each adding the product of its step to the sum before it (``s += q[t] * k[t]``):
    {first group: [its groups in order], later group: None}.  A chain runs as one step (:func:`_chain_step`) where the
    first group stands; its products must be rows a:b of one earlier group, in order."""
    groups = plan.groups
    position = {}
    for g, (kind, members) in enumerate(groups):
        for row, i in enumerate(members):
            position[i] = (g, row)
    single = {g for g, (kind, members) in enumerate(groups) if kind == "sum" and len(members) == 1}
    after: dict = {}  # group -> the sum group of one whose addend is its member
    for g in single:
        c = plan.ops[groups[g][1][0]][1][1]
        if c[0] == "op" and c[1] in position and position[c[1]][0] in single:
            before = position[c[1]][0]
            after[before] = None if before in after else g  # two successors: no chain through it
    heads = single - {g for g in after.values() if g is not None}
    out: dict = {}
    for g in sorted(heads):
        chain = [g]
        while after.get(chain[-1]) is not None:
            chain.append(after[chain[-1]])
        # the products: consecutive rows of one group that comes before the chain
        src = [position.get(plan.ops[groups[h][1][0]][1][0][1]) for h in chain]
        while len(chain) > 1 and not _consecutive(src, chain[0]):
            chain.pop()
            src.pop()
        if len(chain) > 1:
            out[chain[0]] = chain
            for h in chain[1:]:
                out[h] = None
    return out


def _consecutive(src, first_group) -> bool:
    return all(s is not None and s[0] == src[0][0] and s[1] == src[0][1] + k for k, s in enumerate(src)) \
        and src[0][0] < first_group


def _chain_step(prods, start, out, chain, keep):
    """The sums of a chain, one after the other: three NumPy calls a link (float64 sum, rounded to float32 and back)."""
    rows = [out[t] for t in range(len(out))]
    keys = list(enumerate(chain))

    def step(env):
        P = prods(env)
        c = start(env)
        keep[0], keep[1] = P, c
        for t, s in enumerate(rows):
            np.add(P[t], c, out=s)
            c = s.astype(_F32).astype(_F64)
        r = keep[2] = out.astype(_F32)
        for t, g in keys:
            env[g] = r[t:t + 1]
    return step


def _at(v, where):
    """The values of ``v`` (a group's (n, L) rows, one lane array or a number) where the (n, L) mask ``where`` is."""
    v = np.asarray(v)
    if v.ndim == 0:
        return v
    return np.broadcast_to(v, where.shape)[where]


def _chain_inputs(keep):
    """where -> (products, addends) of a chain's last run there: the addends are its start and its rounded sums."""
    def inputs(where):
        P, c, r = keep
        z = np.empty(r.shape, dtype=_F64)
        z[0] = c
        z[1:] = r[:-1]
        return P[where], z[where]
    return inputs


def _group_inputs(keep):
    def inputs(where):
        return _at(keep[0], where), _at(keep[1], where)
    return inputs


def _sum_step(p, c, out, keep, g):
    def step(env):
        keep[0] = pv = p(env)
        keep[1] = cv = c(env)
        np.add(pv, cv, out=out)
        env[g] = out.astype(_F32)
    return step


def _rows(r, n, L):
    """A group's result as (n, L) (inputs that were all one lane array give one row)."""
    if r.ndim == 2:
        return r
    return r.reshape(1, L) if n == 1 else np.broadcast_to(r, (n, L))


def _binary_step(kind, a, b, n, L, g):
    if kind == "prod":
        def step(env):
            env[g] = _rows(np.multiply(a(env), b(env)), n, L)  # float64: exact
        return step
    f = {"mul": np.multiply, "add": np.add, "sub": np.subtract}[kind]

    def step(env):
        env[g] = _rows(canon32(f(a(env), b(env))), n, L)
    return step
