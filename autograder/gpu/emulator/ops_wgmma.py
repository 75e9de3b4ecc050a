"""Hopper's warpgroup MMA (sm_90a): wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16} with A from shared memory
or from registers and B from shared memory, and wgmma.fence / commit_group / wait_group.

No lesson uses it; it is here so that benchmarks/tc_wgmma.cu (issue 30's candidate for lesson 09's reference) can
run on the CPU: its data flow, masks, pipeline barriers and shared-memory races.  The H200 confirmed the layouts and
the arithmetic (2026-12-05): the twelve wgmma forms of the golden data (128-, 64-, 32-byte swizzles and none, K- and
MN-major, N = 8 to 256, bf16, A from registers, scale-d off, negated operands; tests/test_emulator_golden.py) are
bit-equal in every element, and tc_wgmma's kernels passed their selftest and check on it.  What the model is:

* wgmma.mma_async, commit_group and wait_group run when the whole warpgroup (four consecutive warps, threads
  128w .. 128w + 127 of a block whose size is a multiple of 128) has arrived.  The MMA reads its operands at once
  (so a write to shared memory that a wgmma in flight still reads is not caught), and its result lands in the
  destination registers only when a wait_group retires its commit group; until then they hold :data:`POISON` (a
  NaN), so a kernel that reads an accumulator before its wait computes NaN.  A later wgmma of the same warpgroup
  that accumulates into registers still in flight reads the pending values (the PTX ISA allows that chain).
  ``wgmma.fence`` and ``fence.proxy.async`` are not checked.
* Shared-memory operands follow the matrix descriptor of the PTX ISA (start address, leading and stride byte
  offsets, each >> 4; swizzle mode in bits 62-63: 1 = 128 B, 2 = 64 B, 3 = 32 B) and the canonical layouts CUTLASS
  writes down (cute/atom/mma_traits_sm90_gmma.hpp, in 16-byte units, T = 8 halves):
  K-major, no swizzle ((8,m),(T,2)):((1T,SBO),(1,LBO)); swizzled by W = 2/4/8 chunks ((8,m),(T,2)):((W T,SBO),(1,T)).
  MN-major, no swizzle ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)); swizzled ((T,W,m),(8,k)):((1,T,LBO),(W T,SBO)).
  The swizzle is applied to the shared-memory address itself: its 16-byte chunk bits (4, 5, 6 for 128 B) XOR the
  bits three above them.  A non-zero base offset (bits 49-51) is not implemented.
* Each 16-byte row of an operand is read as shared loads of two threads of the warpgroup, two warps apart (the
  async proxy reads for the whole warpgroup, so a write by any thread in the same barrier interval is a race, its
  writer being at least one of the two readers' other thread): bounds, races, uninitialised bytes, copies not landed.
* Accumulation is ``ops_tensor.accumulate_f32``, the H200's mma.sync model: its wgmma accumulates the same way.
* Register fragments (PTX ISA, "Register fragments and shared memory matrix layouts" of wgmma): warp v of the
  warpgroup holds rows 16v .. 16v + 15; lane 4g + t holds D's element (16v + g + 8 (i % 4 >= 2), 8 (i // 4) + 2t +
  i % 2) in register i, and A's (rows g, g + 8, columns 2t, 2t + 1, then + 8) as mma.m16n8k16's A fragment.
"""
from __future__ import annotations

import numpy as np

from .errors import Unsupported
from .ops_tensor import _decode, _encode, accumulate_f32
from .program import COLLECTIVE, PLAIN, Op, opcode

WARPGROUP = 128
#: what an accumulator register holds while its wgmma is in flight: a quiet NaN
POISON = np.uint32(0x7FC0BAD0)
_LANE = np.arange(WARPGROUP)
_WARP, _GROUP, _THREAD = _LANE >> 5, (_LANE & 31) >> 2, _LANE & 3
#: swizzle mode field -> 16-byte chunks per swizzled row (W); 0: no swizzle
_SWIZZLE_CHUNKS = {0: 0, 1: 8, 2: 4, 3: 2}


def d_layout(n: int) -> np.ndarray:
    """(n / 2 registers, 128 lanes, 2) of (row, column) of D (64 x n) per register and lane of a warpgroup."""
    i = np.arange(n // 2)[:, None]
    row = 16 * _WARP + _GROUP + 8 * ((i % 4) >= 2)
    col = 8 * (i // 4) + 2 * _THREAD + i % 2
    return np.stack(np.broadcast_arrays(row, col), axis=-1)


def a_layout() -> np.ndarray:
    """(4 registers, 2 halves, 128 lanes, 2) of (row, column) of A (64 x 16) held in registers."""
    r = np.arange(4)[:, None, None]
    e = np.arange(2)[None, :, None]
    row = 16 * _WARP + _GROUP + 8 * (r % 2)
    col = 2 * _THREAD + e + 8 * (r // 2)
    return np.stack(np.broadcast_arrays(row, col), axis=-1)


def descriptor_fields(desc: int) -> tuple[int, int, int, int, int]:
    """(start address, leading byte offset, stride byte offset, base offset, swizzle mode) of a matrix descriptor."""
    return ((desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4,
            (desc >> 49) & 7, (desc >> 62) & 3)


def chunk_addresses(desc: int, rows: int, k_major: bool) -> np.ndarray:
    """Shared-memory addresses of the 16-byte chunks of an operand of ``rows`` rows (M or N) and 16 halves of K:
    K-major (rows, 2), chunk j holding k = 8j .. 8j + 7 of a row; MN-major (16, rows / 8), chunk j of k holding rows
    8j .. 8j + 7.  Swizzled as the hardware does it (module docstring)."""
    start, lbo, sbo, base, mode = descriptor_fields(desc)
    if base:
        raise Unsupported("wgmma descriptor with a non-zero base offset")
    w = _SWIZZLE_CHUNKS[mode]
    if k_major:
        r = np.arange(rows)[:, None]
        j = np.arange(2)[None, :]
        if w:
            a = start + (r % 8) * (16 * w) + (r // 8) * sbo + 16 * j
        else:
            a = start + (r % 8) * 16 + (r // 8) * sbo + j * lbo
    else:
        k = np.arange(16)[:, None]
        j = np.arange(rows // 8)[None, :]  # chunk j: rows 8j .. 8j + 7
        if w:
            a = start + (j % w) * 16 + (j // w) * lbo + (k % 8) * (16 * w) + (k // 8) * sbo
        else:
            a = start + j * sbo + (k % 8) * 16 + (k // 8) * lbo
    a = np.asarray(a, dtype=np.int64)
    if w:
        bits = w.bit_length() - 1  # 3, 2 or 1 chunk bits
        mask = (1 << bits) - 1
        a = a ^ (((a >> 7) & mask) << 4)
    return a


def _uniform(values: np.ndarray, what: str, machine, ins, lanes) -> np.ndarray:
    """Per warpgroup, the value of its first lane; a warpgroup whose lanes disagree is a finding."""
    v = values.reshape(-1, WARPGROUP)
    bad = np.flatnonzero((v != v[:, :1]).any(axis=1))
    if len(bad):
        machine.fault("wgmma_operand", f"{what} инструкции wgmma различается между потоками одной варп-группы: "
                      "он должен быть одинаковым у всех 128", int(lanes[bad[0] * WARPGROUP]), ins, len(bad))
    return v[:, 0]


class InFlight:
    """The wgmma results of one chunk of blocks not yet retired by a wait_group, per warpgroup (lanes // 128)."""

    def __init__(self, lanes: int):
        self.open: dict = {}        # warpgroup -> {register name: setter} of wgmmas not yet committed
        self.committed: dict = {}   # warpgroup -> [{register name: setter}, ...], oldest first
        self.values: dict = {}      # register name -> (lanes,) uint32 results
        self.pending: dict = {}     # register name -> (lanes,) bool: its result has not landed
        self.lanes = lanes

    def issue(self, groups, name: str, setter, lanes, words):
        """A wgmma of the warpgroups ``groups`` (their ``lanes``) writes ``words`` into register ``name``."""
        if name not in self.values:
            self.values[name] = np.zeros(self.lanes, dtype=np.uint32)
            self.pending[name] = np.zeros(self.lanes, dtype=bool)
        self.values[name][lanes] = words
        self.pending[name][lanes] = True
        for group in groups:
            self.open.setdefault(int(group), {})[name] = setter

    def current(self, name: str, lanes, words):
        """The registers' words for the lanes, with the results still in flight in their place."""
        if name not in self.pending:
            return words
        return np.where(self.pending[name][lanes], self.values[name][lanes], words)

    def commit(self, group: int):
        self.committed.setdefault(group, []).append(self.open.pop(group, {}))

    def wait(self, group: int, keep: int, machine):
        """Retire the oldest commit groups of ``group`` until ``keep`` remain: their results land, except in a
        register a later group in flight writes again (it stays poisoned until that one lands)."""
        queue = self.committed.get(group, [])
        lanes = group * WARPGROUP + np.arange(WARPGROUP)
        mask = np.zeros(machine.L, dtype=bool)
        mask[lanes] = True
        while len(queue) > keep:
            retired = queue.pop(0)
            later = set(self.open.get(group, {})).union(*queue) if queue else set(self.open.get(group, {}))
            for name, setter in retired.items():
                if name in later:
                    continue
                full = np.zeros(machine.L, dtype=np.uint32)
                full[lanes] = self.values[name][lanes]
                setter(full, mask)
                self.pending[name][lanes] = False


def in_flight(machine) -> InFlight:
    """The chunk's :class:`InFlight` (a new one when the machine has moved to the next chunk of blocks)."""
    state = getattr(machine, "wgmma_in_flight", None)
    if state is None or state[0] != machine.chunk_start:
        state = machine.wgmma_in_flight = (machine.chunk_start, InFlight(machine.L))
    return state[1]


@opcode("wgmma")
def build_wgmma(ins, c):
    parts = ins.parts[1:]
    machine = c.m
    if parts[:1] in (("fence",), ("commit_group",), ("wait_group",)):
        if parts[1:] != ("sync", "aligned"):
            raise Unsupported("wgmma." + ".".join(parts))
        if parts[0] == "fence":
            return Op(PLAIN, lambda m: None)
        if parts[0] == "wait_group" and (len(ins.operands) != 1 or ins.operands[0].kind != "imm"):
            raise Unsupported("wgmma.wait_group without an immediate count")
        keep = int(ins.operands[0].value) if parts[0] == "wait_group" else 0

        def group_op(mask):
            state = in_flight(machine)
            for group in _whole_warpgroups(machine, mask, ins)[::WARPGROUP] // WARPGROUP:
                if parts[0] == "commit_group":
                    state.commit(int(group))
                else:
                    state.wait(int(group), keep, machine)
        return Op(COLLECTIVE, group_op, ready=lambda part: _ready(machine, part),
                  member=lambda: np.uint32(0xFFFFFFFF))
    if parts[:3] != ("mma_async", "sync", "aligned") or len(parts) != 7:
        raise Unsupported("wgmma." + ".".join(parts))
    shape, dtype, atype, btype = parts[3:]
    if not (shape.startswith("m64n") and shape.endswith("k16")) or dtype != "f32" or atype != btype \
            or atype not in ("f16", "bf16"):
        raise Unsupported("wgmma." + ".".join(parts))
    N = int(shape[4:-3])
    if N % 8 or not 8 <= N <= 256:
        raise Unsupported(f"wgmma with N = {N}")
    if machine.Tp % WARPGROUP:
        raise Unsupported("wgmma in a block whose size is not a multiple of 128 threads")
    ops = ins.operands
    a_in_registers = ops[1].kind == "vec"
    if len(ops) != (7 if a_in_registers else 8) or any(o.kind != "imm" for o in ops[4:]) or ops[0].kind != "vec" \
            or len(ops[0].items) != N // 2:
        raise Unsupported("wgmma operands")
    scale_a, scale_b = int(ops[4].value), int(ops[5].value)
    trans_a = 0 if a_in_registers else int(ops[6].value)
    trans_b = int(ops[-1].value)
    d_set = [c.dst(o, "b32") for o in ops[0].items]
    d_get = [c.src(o, "b32") for o in ops[0].items]
    d_names = [o.value for o in ops[0].items]
    if a_in_registers:
        if len(ops[1].items) != 4:
            raise Unsupported("wgmma A from registers needs 4 registers")
        a_get = [c.src(o, "b32") for o in ops[1].items]
    else:
        a_desc = c.src(ops[1], "b64")
    b_desc = c.src(ops[2], "b64")
    scale_d = c.src(ops[3], "pred")  # a predicate register or an immediate
    layout_d, layout_a = d_layout(N), a_layout()

    def per_lane(getter, lanes):
        v = np.asarray(getter())
        return np.full(len(lanes), v) if v.ndim == 0 else v[lanes]

    def operand(desc, rows: int, k_major: bool, lanes, groups) -> np.ndarray:
        """(warpgroups, rows, 16) of the shared-memory operand as float64."""
        out = np.zeros((len(groups), rows, 16), dtype=np.float64)
        for i, dsc in enumerate(desc):
            addr = chunk_addresses(int(dsc), rows, k_major).reshape(-1)
            first = np.arange(len(addr)) % WARPGROUP
            readers = lanes[i * WARPGROUP + np.concatenate([first, first ^ 64])]  # two threads, two warps apart
            halves = machine.access("shared", readers, np.concatenate([addr, addr]), 2, 8, ins).T[:len(addr)]
            values = _decode(halves.astype(np.uint64), atype)
            if k_major:
                out[i] = values.reshape(rows, 16)
            else:
                out[i] = values.reshape(16, rows).T
        return out

    def run(mask):
        lanes = _whole_warpgroups(machine, mask, ins)
        if not len(lanes):
            return
        groups = lanes[::WARPGROUP] // WARPGROUP
        B = operand(_uniform(per_lane(b_desc, lanes), "дескриптор матрицы B", machine, ins, lanes), N,
                    not trans_b, lanes, groups)  # (groups, N, 16)
        if a_in_registers:
            words = np.stack([per_lane(g, lanes).reshape(-1, WARPGROUP) for g in a_get], axis=1)  # (G, 4, 128)
            halves = (words[:, :, None, :].astype(np.uint64) >> (np.arange(2, dtype=np.uint64)[None, None, :, None]
                                                                 * np.uint64(16))) & np.uint64(0xFFFF)
            A = np.zeros((len(groups), 64, 16))
            A[:, layout_a[..., 0].reshape(-1), layout_a[..., 1].reshape(-1)] = \
                _decode(halves, atype).reshape(len(groups), -1)
        else:
            A = operand(_uniform(per_lane(a_desc, lanes), "дескриптор матрицы A", machine, ins, lanes), 64,
                        not trans_a, lanes, groups)
        A, B = A * scale_a, np.swapaxes(B, 1, 2) * scale_b  # (G, 64, 16), (G, 16, N)
        keep = _uniform(per_lane(scale_d, lanes).astype(bool), "предикат scale-d", machine, ins, lanes)
        state = in_flight(machine)
        words = np.stack([state.current(name, lanes, per_lane(g, lanes)).reshape(-1, WARPGROUP)
                          for name, g in zip(d_names, d_get)], axis=1)  # (G, N/2, 128)
        C = np.zeros((len(groups), 64, N))
        C[:, layout_d[..., 0].reshape(-1), layout_d[..., 1].reshape(-1)] = \
            _decode(words.astype(np.uint64), "f32").reshape(len(groups), -1)
        C[~keep] = 0.0
        D = _encode(accumulate_f32(A, B, C), "f32")  # (G, 64, N) bits
        out = D[:, layout_d[..., 0], layout_d[..., 1]]  # (G, N/2, 128)
        poison = np.full(machine.L, POISON, dtype=np.uint32)
        issued = np.zeros(machine.L, dtype=bool)
        issued[lanes] = True
        for r, (name, s) in enumerate(zip(d_names, d_set)):
            state.issue(groups, name, s, lanes, out[:, r].reshape(-1))
            s(poison, issued)
    return Op(COLLECTIVE, run, ready=lambda part: _ready(machine, part), member=lambda: np.uint32(0xFFFFFFFF))


def _ready(machine, part) -> np.ndarray:
    """The lanes of ``part`` whose warpgroups have every live lane in ``part``."""
    present = machine.warp_bits(part).reshape(-1, 4)
    alive = machine.warp_bits(~machine.exited).reshape(-1, 4)
    ok = ((alive & ~present) == 0).all(axis=1)
    return part & np.repeat(ok, WARPGROUP)


def _whole_warpgroups(machine, mask, ins) -> np.ndarray:
    """The lanes of the warpgroups of ``mask`` that are whole; a warpgroup with threads missing is a finding (the
    GPU leaves the result undefined) and does not run."""
    m = np.asarray(mask).reshape(-1, WARPGROUP)
    here = m.any(axis=1)
    whole = m.all(axis=1)
    partial = np.flatnonzero(here & ~whole)
    if len(partial):
        g = int(partial[0])
        machine.fault("partial_warp_collective",
                      f"wgmma выполнили только {int(m[g].sum())} из 128 потоков варп-группы: эта операция требует всю "
                      "варп-группу (четыре варпа подряд); на GPU результат не определён",
                      g * WARPGROUP + int(np.flatnonzero(m[g])[0]), ins, len(partial))
    groups = np.flatnonzero(whole)
    return (groups[:, None] * WARPGROUP + _LANE).reshape(-1)
