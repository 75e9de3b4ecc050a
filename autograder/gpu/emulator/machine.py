"""A launch: every thread of a chunk of blocks is a NumPy lane; the compiled program runs over all of them.

Execution and reconvergence (the rule the findings rely on).  Lanes with the same program counter form a
group; the machine always executes the group with the lowest program counter, all its lanes at once.  Each
thread therefore follows its own program order; threads that diverged at a branch meet again at the first
program counter both paths reach (for NVVM's block layouts that is the immediate post-dominator), where their
groups merge.  Blocks are independent; a chunk holds as many whole blocks as fit in :data:`LANES`.

* ``bar.sync`` / ``barrier.sync``: a lane waits; when no group can run, every block whose live threads all
  wait is released (the shared-memory epoch of the block advances).  Threads of one block waiting at
  different barriers, or waiting while others of the block have exited, are findings.
* Warp collectives (``shfl.sync``, ``vote.sync``, ``match.sync``, ``redux.sync``, ``bar.warp.sync``; ``mma.sync``
  and ``ldmatrix`` with the full mask): a warp executes one only when every live lane of its member mask has
  arrived at it; lanes that arrive early wait.  A collective no
  lane can complete any more is a finding (and then runs with the lanes that came).
* Lanes are laid out block by block, each block padded to whole warps (padding lanes never run).

Cost model (what a launch spends its time on; ``benchmarks/emulator_speed.py`` measures it).  One *issue* is one
instruction executed by one group (:attr:`Machine.issued`, the unit of ``max_issues``); it costs a handful of
NumPy calls over the group's lanes (a few microseconds each, almost independent of the lane count below ~10^4),
so a launch costs about its issues times the NumPy calls per instruction.  Hence:

* An instruction is built into its closure (``program.Compiler.build``) when a thread first reaches it, not at
  launch: kernels with large unreached parts (lesson 11's split kernel: 8333 instructions) start at once.
* A group runs its instructions back to back while its program counter stays below every other group's; only
  where that ends (a divergent branch, a barrier, an exit, reaching another group) does it go back to the set
  of groups.  The schedule and the issue count are those of the rule above.
* Within that, a straight run of plain instructions (no branch, barrier, exit or collective; at most
  :data:`_STRAIGHT`, kept per starting pc: :meth:`Machine._straight`) is one Python loop over its closures, cut
  where it would reach another group's pc or the ``max_issues`` budget: the issue count goes up by the run's
  length, and where a closure raises (a fatal finding, ``Unsupported``) the count and the current instruction are
  those of the instruction-by-instruction loop.
* Within a straight run, a stretch of f32 ``mul``/``add``/``sub``/``fma.rn`` and ``ld.shared.f32`` (fusion.py) runs
  as one fused segment: a data-flow level at a time (the independent loads, muls or FMAs of a level: one NumPy call
  each), an FMA chain three calls a link; it gives the closures' bits, findings and bookkeeping, or falls back to
  the closures having changed nothing (``launch(fuse=False)``: never fused).
* Loads and stores of every lane (no thread exited, no padding) pass the address register and write the
  destination whole, without the index array.
* A closure gets ``None`` for its mask when the group is every live lane (no masking), and the lanes' index
  array (:meth:`Machine.lanes_of`) is then the same read-only array until a thread exits, with the shadow
  keys of those lanes kept beside it.
* Shared-memory reads check the writers' shadow words at once (races, uninitialised bytes: reported by the
  reading instruction), but the readers' summary is only brought up to date when a write needs it
  (``memory.SharedMemory.track_read``); reads between two barriers with no write after them cost no bookkeeping.
* A clean shared load of every live lane also reads the loads that follow it in its straight-line run through
  the same base register (an unrolled ``s[j * D + t]`` loop), all at once (:meth:`Machine._batch_reads`); each
  of them takes its row only if the shared memory has not changed since (``SharedMemory.version``) and its lanes'
  addresses are the assumed ones, else it runs as usual.  Where any of them would find something (out of
  bounds, misaligned, uninitialised, written in this epoch) there is no batch: each reports for itself.
* What depends on the kernel alone (mul+add contractions, access granules, the batched-read plans) is computed
  once per parsed kernel (``program.derived``), not per launch.
* ``launch`` pauses Python's garbage collector while it runs.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from .counts import flops_per_thread
from .errors import Unsupported
from .findings import FATAL, Finding
from .memory import (EPOCH_SHIFT, GLOBAL_BASE, LOCAL_WINDOW, SHARED_WINDOW, WEP_SHIFT, WINDOW_SIZE, GlobalArena,
                     LocalMemory, SharedMemory, allocation_of, demangle)
from . import fusion
from .program import BARRIER, BRANCH, COLLECTIVE, EXIT, PLAIN, UNSIGNED, Compiler, Op, _writes, contractions, derived
from .ptx import TYPE_BITS, Kernel
from .rounding import nnz

#: Lanes per chunk (threads emulated at once); whole blocks, at least one.
LANES = 1 << 15
#: Instruction issues (group steps) after which a launch stops with a "timeout" finding.
MAX_ISSUES = 2_000_000
#: Findings kept per launch.
MAX_FINDINGS = 50

_BITS = (np.uint64(1) << np.arange(32, dtype=np.uint64))


class _Stop(Exception):
    pass


#: Mnemonics that only read and write registers: a run of batched shared loads (Machine._read_run) may span them.
_REGISTER_ONLY = frozenset(
    "abs add and bfe bfi bfind brev clz cnot copysign cos cvt cvta div ex2 fma lg2 lop3 mad max min mov mul neg "
    "not or popc prmt rcp rem rsqrt sad selp setp shf shl shr sin slct sqrt sub tanh testp xor".split())
#: Instructions a run of batched shared loads looks ahead, and lanes x loads one batch holds at most.
_RUN = 256
_BATCH_ELEMENTS = 1 << 20
#: Plain instructions one straight run (Machine._straight) holds at most.
_STRAIGHT = 256


@dataclasses.dataclass
class _Batch:
    """Shared reads made ahead (Machine._batch_reads): valid for lanes ``idx`` while the shared memory, its version
    and the lanes' keys are these; row ``rows[i]`` is instruction i's, for the addresses ``offs`` of that row."""
    idx: np.ndarray
    keys: np.ndarray
    shared: object
    version: int
    rows: dict
    offs: np.ndarray
    b: np.ndarray
    values: np.ndarray


@dataclasses.dataclass
class Result:
    findings: list
    issued: int
    seconds: float
    #: For the roofline (counts.py): bytes the global loads and stores moved, and floating-point operations.
    global_read: int = 0
    global_written: int = 0
    flops: float = 0.0
    tensor_flops: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.findings


def _dims(v) -> tuple:
    if isinstance(v, (int, np.integer)):
        v = (int(v),)
    v = tuple(int(x) for x in v)
    if not 1 <= len(v) <= 3 or any(x < 1 for x in v):
        raise ValueError(f"launch dimensions must be 1-3 positive integers, got {v}")
    return v + (1,) * (3 - len(v))


def _storage(t: str):
    bits = TYPE_BITS[t]
    if bits == 1:
        return np.bool_
    return UNSIGNED[max(bits, 16)] if bits <= 64 else None


def _granule(kernel: Kernel, space: tuple = ("shared",)) -> int:
    """The smallest access (bytes, at most 4) the kernel can make to ``space`` (that space or generic)."""
    g = 4
    spaces = {"param", "global", "local", "const", "shared"} - set(space)
    for ins in kernel.instructions:
        if ins.mnemonic in ("ld", "ldu", "st", "atom", "red"):
            parts = ins.parts[1:]
            if any(p in parts for p in spaces):
                continue
            t = next((p for p in reversed(parts) if p in TYPE_BITS), None)
            if t is not None:
                g = min(g, max(TYPE_BITS[t] // 8, 1))
    return {1: 1, 2: 2, 4: 4}.get(g, 1)


def _flop_prefixes(kernel) -> tuple[list, list]:
    per = [flops_per_thread(ins.parts) for ins in kernel.instructions] + [(0.0, 0.0)]
    cuda, tensor = [0.0], [0.0]
    for c, t in per:
        cuda.append(cuda[-1] + c)
        tensor.append(tensor[-1] + t)
    return cuda, tensor


class Machine:
    def __init__(self, kernel: Kernel, grid, block, args, shared_bytes: int = 0, *, max_issues: int = MAX_ISSUES,
                 lanes: int = LANES, contract: bool = True, fuse: bool = True):
        self.contract = contract
        self.fuse = fuse
        self.kernel = kernel
        self.grid, self.block = _dims(grid), _dims(block)
        self.max_issues = max_issues
        self.findings: list[Finding] = []
        self._seen: dict = {}
        self.issued = 0
        bx, by, bz = self.block
        self.T = bx * by * bz
        if self.T > 1024:
            raise ValueError(f"a block has at most 1024 threads, got {self.block}")
        self.Tp = -(-self.T // 32) * 32
        self.nblocks = self.grid[0] * self.grid[1] * self.grid[2]
        self.B = max(1, min(self.nblocks, lanes // self.Tp))
        self.L = self.B * self.Tp
        self._params(args)
        self._layout(shared_bytes)
        self._lanes()
        self.registers: dict = {}
        self._alive_idx = self._info = self._batch = None
        self._plans: dict = derived(kernel, "read_runs", lambda k: {})  # _read_run's plans: the kernel's alone
        self._starts = set(kernel.labels.values())
        self._atomic = False
        self.granule = derived(kernel, "granule", _granule)
        self.global_granule = derived(kernel, "global_granule", lambda k: _granule(k, ("global",)))
        self.global_writer = None
        self.uses_async = False
        # Ops are built when a thread first reaches them (_issue_all); the last one is falling off the end.
        self.compiler = Compiler(self, kernel)
        self.ops: list = [None] * len(kernel.instructions) + [Op(EXIT, None, ins=None)]
        self._runs: list = [None] * len(self.ops)  # _straight(pc), made when a group first runs from pc
        # Floating-point operations per thread of each instruction, as prefix sums (a straight run adds its slice).
        self._flops, self._tensor_flops = derived(kernel, "flop_prefixes", _flop_prefixes)
        self.flops = self.tensor_flops = 0.0
        self.global_read = self.global_written = 0

    # --- set-up ---------------------------------------------------------------------------------

    def _params(self, args):
        params = self.kernel.params
        if len(args) != len(params):
            raise ValueError(f"kernel {self.kernel.name} takes {len(params)} arguments, got {len(args)}")
        # One allocation per array the arguments point into (views of one array share it, as on a GPU).
        arrays, address = [], {}
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                root, offset = allocation_of(a)
                k = next((k for k, (_, r) in enumerate(arrays) if r is root), None)
                if k is None:
                    k = len(arrays)
                    arrays.append((i, root))
                address[i] = (k, offset)
        self.arena = GlobalArena(arrays)
        address = {i: self.arena.address_of(k) + offset for i, (k, offset) in address.items()}
        offset = 0
        chunks = []
        self.param_offset = {}
        for i, (p, a) in enumerate(zip(params, args)):
            offset = -(-offset // p.align) * p.align
            self.param_offset[p.name] = offset
            if isinstance(a, np.ndarray):
                if p.type not in ("u64", "b64", "s64"):
                    raise TypeError(f"argument {i}: an array passed for a .{p.type} parameter")
                raw = np.array(address[i], dtype=np.uint64).tobytes()
            elif isinstance(a, (bytes, bytearray)):
                # The bytes the driver reads from where the argument is stored, as CuPy passes a scalar (its own
                # size, whatever the parameter's): past them the storage holds zeros.
                raw = (bytes(a) + bytes(p.size))[:p.size]
            elif p.type == "bytes":
                raise TypeError(f"argument {i}: {p.size} bytes expected")
            else:
                if isinstance(a, (bool, np.bool_)):
                    a = int(a)
                t = p.type
                if t in ("f32", "f64", "f16"):
                    raw = np.array(float(a), dtype={"f32": np.float32, "f64": np.float64, "f16": np.float16}[t]).tobytes()
                elif isinstance(a, (float, np.floating)):
                    raise TypeError(f"argument {i}: a float passed for a .{t} parameter")
                else:
                    bits = TYPE_BITS[t]
                    raw = np.array(int(a) & ((1 << bits) - 1), dtype=UNSIGNED[max(bits, 8)]).tobytes()
            chunks.append((offset, raw))
            offset += p.size
        buf = bytearray(max(offset, 8) + 16)
        for off, raw in chunks:
            buf[off:off + len(raw)] = raw
        self.param_bytes = bytes(buf)

    def _layout(self, shared_bytes):
        self.shared_offset, self.local_offset = {}, {}
        shared_vars, off, loff = [], 0, 0
        externs = []
        for v in self.kernel.variables:
            if v.space == "shared":
                if v.extern:
                    externs.append(v)
                    continue
                if v.name in self.shared_offset:
                    continue
                off = -(-off // v.align) * v.align
                self.shared_offset[v.name] = off
                shared_vars.append((off, v.size, v.name))
                off += v.size
            else:
                loff = -(-loff // v.align) * v.align
                self.local_offset[v.name] = loff
                loff += v.size
        if externs:
            align = max([16] + [v.align for v in externs])
            off = -(-off // align) * align
            for v in externs:
                self.shared_offset[v.name] = off
                shared_vars.append((off, 0, v.name))
        elif shared_bytes:
            off = -(-off // 16) * 16
        self.static_shared = off if not externs else self.shared_offset[externs[0].name]
        self.shared_size = off + int(shared_bytes)
        self.shared_vars = shared_vars
        self.local_size = loff

    def _lanes(self):
        L, Tp = self.L, self.Tp
        bx, by, _ = self.block
        lane = np.arange(L, dtype=np.int64)
        self.slot = lane // Tp
        self.tid = lane % Tp
        self.laneid = (lane % 32).astype(np.uint32)
        u32 = np.uint32
        tx, ty, tz = self.tid % bx, (self.tid // bx) % by, self.tid // (bx * by)
        self.wep = np.zeros(L, dtype=np.int64)
        sp = {"%tid.x": tx.astype(u32), "%tid.y": ty.astype(u32), "%tid.z": tz.astype(u32),
              "%laneid": self.laneid, "%warpid": (self.tid // 32).astype(u32),
              "%nwarpid": np.full(L, Tp // 32, u32), "%smid": np.zeros(L, u32), "%nsmid": np.ones(L, u32)}
        for k, axis in enumerate("xyz"):
            sp[f"%ntid.{axis}"] = np.full(L, self.block[k], u32)
            sp[f"%nctaid.{axis}"] = np.full(L, self.grid[k], u32)
            sp[f"%ctaid.{axis}"] = np.zeros(L, u32)
        lid = self.laneid.astype(np.uint64)
        one = np.uint64(1)
        sp["%lanemask_eq"] = (one << lid).astype(u32)
        sp["%lanemask_lt"] = ((one << lid) - one).astype(u32)
        sp["%lanemask_le"] = ((one << (lid + one)) - one).astype(u32)
        sp["%lanemask_gt"] = (~((one << (lid + one)) - one) & np.uint64(0xFFFFFFFF)).astype(u32)
        sp["%lanemask_ge"] = (~((one << lid) - one) & np.uint64(0xFFFFFFFF)).astype(u32)
        self.special = sp

    def update_keys(self):
        """The shadow-memory keys of the lanes: block epoch, warp-sync count and thread (memory.py's layout)."""
        self.lane_ep = self.shared.epoch[self.slot] << EPOCH_SHIFT
        self.lane_key = self.lane_ep | (self.wep << WEP_SHIFT) | (self.tid + 1)
        self._info = None

    def register(self, name: str) -> np.ndarray:
        r = self.registers.get(name)
        if r is None:
            t = self.kernel.registers.get(name)
            if t is None:
                raise Unsupported(f"register {name} not declared")
            dt = _storage(t)
            if dt is None:
                raise Unsupported(f"register type .{t}")
            r = self.registers[name] = np.zeros(self.L, dtype=dt)
        return r

    def symbol_address(self, name: str) -> int:
        if name in self.shared_offset:
            return self.shared_offset[name]
        if name in self.param_offset:
            return self.param_offset[name]
        if name in self.local_offset:
            return self.local_offset[name]
        raise Unsupported(f"symbol {name}")

    def param_value(self, offset: int, size: int) -> int:
        return int.from_bytes(self.param_bytes[offset:offset + size], "little")

    # --- findings -------------------------------------------------------------------------------

    def coords(self, lane: int):
        slot, t = divmod(int(lane), self.Tp)
        gx, gy, _ = self.grid
        bx, by, _ = self.block
        b = self.chunk_start + slot
        return (b % gx, (b // gx) % gy, b // (gx * gy)), (t % bx, (t // bx) % by, t // (bx * by))

    def thread_coords(self, tid: int):
        bx, by, _ = self.block
        return (tid % bx, (tid // bx) % by, tid // (bx * by))

    def fault(self, kind: str, message: str, lane, ins, count: int = 1):
        key = (kind, ins.index if ins is not None else None)
        if key in self._seen:
            self._seen[key].count += count
        elif len(self.findings) < MAX_FINDINGS:
            block, thread = self.coords(lane) if lane is not None else (None, None)
            f = Finding(kind, message, block, thread, ins.text if ins is not None else None,
                        ins.line if ins is not None else None, count)
            self.findings.append(f)
            self._seen[key] = f
        if kind in FATAL:
            raise _Stop()

    def unsupported(self, ins, why, m):
        lanes = self.lanes_of(m)
        self.fault("unsupported", f"эмулятор не умеет выполнять инструкцию «{ins.text}» ({why}); "
                   "эту проверку можно пройти только на GPU", lanes[0] if len(lanes) else None, ins)

    def lanes_of(self, m) -> np.ndarray:
        if m is None:
            return self.alive_idx()
        return np.flatnonzero(m)

    def alive_idx(self):
        """The lanes of the live threads (read-only; the same array until a thread exits)."""
        idx = self._alive_idx
        if idx is None:
            idx = self._alive_idx = np.flatnonzero(self.alive)
            idx.flags.writeable = False
        return idx

    def _lane_keys_per_granule(self, idx, n, ep, key):
        """``ep`` and ``key`` of lanes ``idx`` repeated ``n`` times each (kept for the live lanes, as _lane_info)."""
        c = self._info
        if c is not None and c[0] is idx:
            r = c[2].get(n)
            if r is None:
                r = c[2][n] = (np.repeat(ep, n), np.repeat(key, n))
                for a in r:
                    a.flags.writeable = False
            return r
        return np.repeat(ep, n), np.repeat(key, n)

    def _lane_info(self, idx):
        """slot, slot * granules per block, shadow epoch and key of lanes ``idx`` (kept for the live lanes'
        array of :meth:`alive_idx` until a thread exits or the keys change)."""
        c = self._info
        if c is not None and c[0] is idx:
            return c[1]
        slot = self.slot[idx]
        info = (slot, slot * self.shared.gstride, self.lane_ep[idx], self.lane_key[idx])
        if idx is self._alive_idx:
            for a in info:
                a.flags.writeable = False
            self._info = (idx, info, {})
        return info

    # --- memory ---------------------------------------------------------------------------------

    def _space_of_generic(self, addr):
        shared = (addr >= np.uint64(SHARED_WINDOW)) & (addr < np.uint64(SHARED_WINDOW + WINDOW_SIZE))
        local = (addr >= np.uint64(LOCAL_WINDOW)) & (addr < np.uint64(LOCAL_WINDOW + WINDOW_SIZE))
        return shared, local

    def access(self, space, idx, addr, size, nvec, ins, write=False, values=None):
        """Read (returns (nvec, n) raw bits) or write ``values`` at per-lane ``addr`` for lanes ``idx``."""
        addr = np.asarray(addr)
        if addr.ndim == 0:
            addr = np.full(len(idx), addr, dtype=addr.dtype)
        if space == "generic":
            addr = addr.astype(np.uint64)
            shared, local = self._space_of_generic(addr)
            if not shared.any() and not local.any():
                return self.access("global", idx, addr, size, nvec, ins, write, values)
            out = np.zeros((nvec, len(idx)), dtype=UNSIGNED[size * 8]) if not write else None
            for sel, sp, base in ((shared, "shared", SHARED_WINDOW), (local, "local", LOCAL_WINDOW),
                                  (~(shared | local), "global", 0)):
                if not sel.any():
                    continue
                a = addr[sel] - np.uint64(base)
                v = values[:, sel] if write else None
                r = self.access(sp, idx[sel], a, size, nvec, ins, write, v)
                if not write:
                    out[:, sel] = r
            return out
        total = size * nvec
        dt = UNSIGNED[size * 8]
        if space == "global":
            if write:
                self.global_written += total * len(idx)
            else:
                self.global_read += total * len(idx)
            addr = np.asarray(addr, dtype=np.uint64)
            if not self.arena.within_one(addr, total):
                k = self.arena.locate(addr, total)
                bad = k < 0
            else:
                bad = None
            if bad is not None and bad.any():
                i = int(np.flatnonzero(bad)[0])
                self.fault("global_oob", "выход за границы глобальной памяти: "
                           + self.arena.explain(int(addr[i]), total, write), idx[i], ins, int(bad.sum()))
            self._aligned(addr, total, idx, ins)
            off = (addr - np.uint64(GLOBAL_BASE)).astype(np.int64) // size
            view = self.arena.data.view(dt)
            if write and not self._atomic:
                self._global_writes(idx, off * size, total, view, off, values, nvec, ins)
                return None
        elif space == "shared":
            off = np.asarray(addr, dtype=np.int64)
            batch = self._batch
            if batch is not None and not write and ins.index in batch.rows and idx is batch.idx:
                r = self._batched_read(batch, ins, off)
                if r is not None:
                    return r
            # off < 0 or off + total > size, in one comparison (a negative offset is a huge unsigned one)
            if total > self.shared_size or nnz(off.view(np.uint64)
                                                            > np.uint64(self.shared_size - total)):
                bad = (off < 0) | (off + total > self.shared_size)
                i = int(np.flatnonzero(bad)[0])
                o = int(off[i])
                if o >= self.shared_size or o < 0:
                    where = f"смещение {o} Б"
                else:
                    where = f"смещение {o} Б ({self.shared_name(o)})"
                self.fault("shared_oob", f"выход за границы разделяемой памяти: {'запись' if write else 'чтение'} "
                           f"{total} Б по {where}, а у блока {self.shared_size} Б разделяемой памяти "
                           f"(статической {self.static_shared} Б, динамической {self.shared_size - self.static_shared} Б)",
                           idx[i], ins, int(bad.sum()))
            self._aligned(off, total, idx, ins)
            sh = self.shared
            slot, slot_g, ep, key = self._lane_info(idx)
            first = slot_g + (off >> sh.gshift)  # the granule of each lane's first byte
            n = total >> sh.gshift  # granules per lane
            if n == 1:
                b, ep_g, key_g = first, ep, key
            else:  # the granules lane by lane (as SharedMemory._granules lays them out), the keys repeated
                b = (first[:, None] + np.arange(n, dtype=np.int64)).reshape(-1)
                ep_g, key_g = self._lane_keys_per_granule(idx, n, ep, key)
            if self.uses_async and not write:
                pend = sh.pending[b]
                if pend.any():
                    i = int(np.flatnonzero(pend)[0]) // max(total >> sh.gshift, 1)
                    self.fault("cp_async_pending", f"чтение разделяемой памяти ({self.shared_name(int(off[i]))}), "
                               "в которую копирование cp.async ещё не доставлено: перед чтением нужны "
                               "cp.async.wait_group (или __pipeline_wait_prior) и __syncthreads()", idx[i], ins,
                               int(pend.astype(bool).sum()))
            if self._atomic:
                problems = [] if write else sh.track_atomic(slot, off, total)
            elif write:
                problems = sh.track_write(slot, off, total, ep, key, ins.index)
            else:
                problems = sh.track_read(slot, off, total, ep_g, key_g, ins.index, b)
            for p in problems:
                self._shared_problem(p, idx, ins, write)
            if write:
                sh.version += 1
            elif not problems and size == total == sh.g and idx is self._alive_idx and not self.uses_async \
                    and not self._atomic:
                self._batch_reads(ins, off, slot_g, ep)
            off = first if size == sh.g else (slot * sh.stride + off) // size
            view = sh.data.view(dt)
        elif space == "local":
            off = addr.astype(np.int64)
            bad = (off < 0) | (off + total > self.local_size)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                self.fault("local_oob", f"выход за границы локального массива потока: {'запись' if write else 'чтение'} "
                           f"{total} Б по смещению {int(off[i])} Б, а локальной памяти у потока {self.local_size} Б",
                           idx[i], ins, int(bad.sum()))
            self._aligned(off, total, idx, ins)
            off = (idx * self.local.stride + off) // size
            view = self.local.data.view(dt)
        else:
            raise Unsupported(f"state space .{space}")
        if write:
            for k in range(nvec):
                view[off + k] = values[k]
            return None
        return view[off + np.arange(nvec)[:, None]] if nvec > 1 else view[off][None, :]

    # --- asynchronous copies (ops_async) -------------------------------------------------------------

    def async_issue(self, idx, dst, src, size, src_size, ins):
        """Read the source now (bytes past ``src_size`` are zeros), check the destination, queue the copy."""
        if src_size is None or (src_size == size).all():
            data = self.access("global", idx, src, 1, size, ins).T.copy()
        else:
            data = np.zeros((len(idx), size), dtype=np.uint8)
            for k in range(size):
                sel = src_size > k
                if sel.any():
                    data[sel, k] = self.access("global", idx[sel], src[sel] + np.uint64(k), 1, 1, ins)[0]
        if dst.min() < 0 or dst.max() + size > self.shared_size:
            bad = (dst < 0) | (dst + size > self.shared_size)
            i = int(np.flatnonzero(bad)[0])
            self.fault("shared_oob", f"выход за границы разделяемой памяти: cp.async пишет {size} Б по смещению "
                       f"{int(dst[i])} Б, а у блока {self.shared_size} Б разделяемой памяти", idx[i], ins, int(bad.sum()))
        self._aligned(dst, size, idx, ins)
        sh = self.shared
        granules = sh._granules(self.slot[idx], dst, size)[0]
        np.add.at(sh.pending, granules, 1)
        sh.version += 1
        self.async_queue.append([idx, self.async_commits[idx].copy(), dst, data, ins, granules])

    def async_commit(self, idx):
        self.async_commits[idx] += 1

    def async_wait(self, idx, n, ins):
        """Land, for lanes ``idx``, every queued copy of a commit group older than their ``n`` newest."""
        waiting = np.zeros(self.L, dtype=bool)
        waiting[idx] = True
        keep = []
        sh = self.shared
        for entry in self.async_queue:
            lanes, seq, dst, data, cins, granules = entry
            land = waiting[lanes] & (seq < self.async_commits[lanes] - n)
            if not land.any():
                keep.append(entry)
                continue
            li = lanes[land]
            size = data.shape[1]
            per = len(granules) // len(lanes)
            g = granules.reshape(len(lanes), per)[land].reshape(-1)
            np.subtract.at(sh.pending, g, 1)
            slot = self.slot[li]
            problems = sh.track_write(slot, dst[land], size, self.lane_ep[li], self.lane_key[li], cins.index)
            for p in problems:
                self._shared_problem(p, li, cins, True)
            flat = slot * sh.stride + dst[land]
            sh.data[(flat[:, None] + np.arange(size)).reshape(-1)] = data[land].reshape(-1)
            if not land.all():
                rest = ~land
                keep.append([lanes[rest], seq[rest], dst[rest], data[rest], cins,
                             granules.reshape(len(lanes), per)[rest].reshape(-1)])
        self.async_queue = keep

    # --- batched shared reads ---------------------------------------------------------------------

    def _read_run(self, ins):
        """The shared loads after ``ins`` in its straight-line run that read through the same base register at
        other offsets (same opcode, unguarded), as (instruction indices, offset deltas); None where there are none.
        The run ends at a label, at an instruction that is not a register-only operation or a load, or where the
        base register is written.  Static: whether a batch is used is decided at run time (``_batched_read``)."""
        plan = self._plans.get(ins.index, False)
        if plan is not False:
            return plan
        plan = None
        a = ins.operands[1] if len(ins.operands) == 2 else None
        if ins.mnemonic == "ld" and ins.guard is None and a is not None and a.kind == "addr" \
                and a.base is not None and a.base.kind == "reg":
            reg, starts = a.base.value, self._starts
            instructions = self.kernel.instructions
            rows, deltas = [], []
            for j in range(ins.index + 1, min(ins.index + _RUN, len(instructions))):
                if j in starts:
                    break
                nxt = instructions[j]
                if nxt.mnemonic not in _REGISTER_ONLY and nxt.mnemonic != "ld":
                    break
                b = nxt.operands[1] if nxt.mnemonic == "ld" and len(nxt.operands) == 2 else None
                if nxt.opcode == ins.opcode and nxt.guard is None and b is not None and b.kind == "addr" \
                        and b.base is not None and b.base.kind == "reg" and b.base.value == reg:
                    rows.append(j)
                    deltas.append(b.offset - a.offset)
                if reg in _writes(nxt):
                    break
            if rows:
                plan = (rows, np.array(deltas, dtype=np.int64)[:, None], {r: k for k, r in enumerate(rows)})
        self._plans[ins.index] = plan
        return plan

    def _batch_reads(self, ins, off, slot_g, ep):
        """After a clean shared read of every live lane at ``off``: check, and read, the loads of its run
        (``_read_run``) at the addresses they will have if the base register keeps its value.  Kept only where
        every one of them is in bounds, aligned, of initialised bytes and with no write of the current epoch
        (where any is not, those loads run one by one and report what they find)."""
        plan = self._read_run(ins)
        if plan is None:
            return
        rows, deltas, row_of = plan
        if len(rows) * len(off) > _BATCH_ELEMENTS:
            k = max(_BATCH_ELEMENTS // len(off), 1)
            rows, deltas = rows[:k], deltas[:k]
            row_of = {r: k for k, r in enumerate(rows)}
        sh, total = self.shared, self.shared.g
        if total > self.shared_size or not len(off):
            return
        # Every address off + delta in bounds and aligned, checked on the lanes' and the deltas' extremes and
        # residues rather than on every (load, lane) pair: the same verdict.
        d = deltas[:, 0]
        if int(off.min()) + int(d.min()) < 0 or int(off.max()) + int(d.max()) > self.shared_size - total:
            return
        if total > 1 and (nnz((d - d[0]) & (total - 1)) or nnz((off + d[0]) & (total - 1))):
            return
        offs = off + deltas
        b = slot_g + (offs >> sh.gshift)
        w = sh.writer[b]
        if nnz(w) < w.size or nnz(w >= ep):
            return
        self._batch = _Batch(self._alive_idx, self.lane_key, sh, sh.version, row_of, offs, b,
                             sh.data.view(UNSIGNED[total * 8])[b])

    def _batched_read(self, batch, ins, off):
        """The read of ``ins`` from the batch, where the shared state and the keys are those it was read at and
        the lanes' addresses are the ones it assumed (else None: the read runs as usual)."""
        k = batch.rows[ins.index]
        sh = self.shared
        if batch.keys is not self.lane_key or batch.shared is not sh or batch.version != sh.version \
                or nnz(off != batch.offs[k]):
            self._batch = None
            return None
        slot, _, ep, key = self._lane_info(batch.idx)
        sh.note_read(batch.b[k], ep, key, ins.index, slot)
        return batch.values[k][None, :]

    def _global_writes(self, idx, byte_off, total, view, off, values, nvec, ins):
        """Store, and report write-write races: two threads writing different values to one global granule
        without an atomic (same values are not reported: the outcome does not depend on the order)."""
        g = self.global_granule
        if self.global_writer is None:
            self.global_writer = np.zeros(len(self.arena.data) // g + 1, dtype=np.int64)
        gid = (self.chunk_start + self.slot[idx]) * self.T + self.tid[idx] + 1
        n = max(total // g, 1)
        first = byte_off // g
        gran = first if n == 1 else (first[:, None] + np.arange(n)).reshape(-1)
        gid_g = gid if n == 1 else np.repeat(gid, n)
        W = self.global_writer[gran]
        other = (W != 0) & (W != gid_g)
        race_lane, other_gid = None, None

        def writes_a_different_value(lanes):
            differs = np.zeros(len(idx), dtype=bool)
            for k in range(nvec):
                differs |= view[off + k] != values[k]
            return lanes & differs

        if other.any():
            race = writes_a_different_value(other.reshape(len(idx), n).any(axis=1))
            if race.any():
                race_lane = int(np.flatnonzero(race)[0])
                other_gid = int(W.reshape(len(idx), n)[race_lane].max())
        for k in range(nvec):
            view[off + k] = values[k]
        self.global_writer[gran] = gid_g
        if race_lane is None:
            back = self.global_writer[gran]
            lost = (back != gid_g).reshape(len(idx), n).any(axis=1)
            if lost.any():
                race = writes_a_different_value(lost)
                if race.any():
                    race_lane = int(np.flatnonzero(race)[0])
                    other_gid = int(back.reshape(len(idx), n)[race_lane].max())
        if race_lane is not None:
            b, t = divmod(other_gid - 1, self.T)
            gx, gy, _ = self.grid
            other_block = (b % gx, (b // gx) % gy, b // (gx * gy))
            address = int(byte_off[race_lane]) + GLOBAL_BASE
            self.fault("global_race", f"гонка в глобальной памяти: поток пишет в {self.arena.where(address)} другое "
                       f"значение, чем поток {self.thread_coords(t)} блока {other_block}, без атомарной операции; "
                       "какое значение останется на GPU, не определено", idx[race_lane], ins)

    def atomic_io(self, space, idx, addr, size, ins, values=None):
        """An atomic's read (values None; returns raw bits) or write of one element per lane: bounds-checked;
        in shared memory it takes no part in races (reads of never-written bytes are still reported)."""
        self._atomic = True
        try:
            r = self.access(space, idx, addr, size, 1, ins, write=values is not None,
                            values=None if values is None else values[None, :])
        finally:
            self._atomic = False
        return None if r is None else r[0]

    def _aligned(self, addr, total, idx, ins):
        align = total if total & (total - 1) == 0 else 1
        if align > 1:
            low = addr & addr.dtype.type(align - 1)
            if nnz(low):
                bad = low != 0
                i = int(np.flatnonzero(bad)[0])
                self.fault("misaligned", f"невыровненный доступ: {total} Б по адресу, не кратному {align} "
                           f"(адрес 0x{int(addr[i]):x})", idx[i], ins, int(bad.sum()))

    def shared_name(self, offset: int) -> str:
        return self.shared.name_of(offset)

    def _shared_problem(self, p, idx, ins, write):
        kind, i, other, other_pc, byte, count = p
        lane = idx[i]
        where = self.shared_name(byte)
        if kind == "uninitialized_shared":
            self.fault(kind, f"чтение неинициализированной разделяемой памяти ({where}): ни один поток блока её "
                       "не записал — на GPU там мусор", lane, ins, count)
            return
        other_ins = self.kernel.instructions[other_pc] if other_pc is not None and other_pc < len(
            self.kernel.instructions) else None
        other_line = f" (строка {other_ins.line})" if other_ins is not None and other_ins.line else ""
        who = f"поток {self.thread_coords(other)}" if other is not None else "другие потоки"
        what = {"raw": (f"читает {where}, а {who} записал его{other_line}"),
                "war": (f"пишет в {where}, а {who} читал его{other_line}"),
                "waw": (f"пишет в {where}, а {who} тоже пишет туда{other_line}")}[kind]
        if other is not None and (int(lane) % self.Tp) // 32 == other // 32:  # both threads of one warp
            self.fault("warp_race", f"гонка в разделяемой памяти внутри одного варпа: поток {what} без "
                       "__syncwarp() между этими доступами; порядок доступов потоков варпа к памяти не определён, "
                       "даже если они идут в ногу", lane, ins, count)
            return
        self.fault("race", f"гонка в разделяемой памяти: поток {what} в том же промежутке между барьерами; "
                   "порядок этих доступов не определён (нужен __syncthreads() между ними)",
                   lane, ins, count)

    # --- warps ----------------------------------------------------------------------------------

    def warp_bits(self, mask) -> np.ndarray:
        """Per warp: the bits of the lanes in ``mask``."""
        return (mask.reshape(-1, 32) * _BITS).sum(axis=1, dtype=np.uint64)

    def ready(self, part, membermask) -> np.ndarray:
        """The lanes of ``part`` whose warps have every live lane of their member mask in ``part``."""
        present = self.warp_bits(part)
        alive = self.warp_bits(~self.exited)
        mm = np.asarray(membermask)
        if mm.ndim == 0:
            required = np.uint64(int(mm) & 0xFFFFFFFF)
        else:
            required = np.bitwise_or.reduce(np.where(part, mm.astype(np.uint64), np.uint64(0)).reshape(-1, 32),
                                            axis=1)
        missing = required & alive & ~present
        ok = missing == 0
        return part & np.repeat(ok, 32)

    # --- running ----------------------------------------------------------------------------------

    def run(self) -> Result:
        start = time.perf_counter()
        try:
            with np.errstate(all="ignore"):
                for first in range(0, self.nblocks, self.B):
                    self._chunk(first)
        except _Stop:
            pass
        self.arena.write_back()
        return Result(self.findings, self.issued, time.perf_counter() - start, self.global_read, self.global_written,
                      self.flops, self.tensor_flops)

    def _chunk(self, first):
        self.chunk_start = first
        n = min(self.B, self.nblocks - first)
        gx, gy, _ = self.grid
        b = first + self.slot
        for k, v in enumerate((b % gx, (b // gx) % gy, b // (gx * gy))):
            self.special["%ctaid." + "xyz"[k]][...] = v.astype(np.uint32)
        self.exists = (self.tid < self.T) & (self.slot < n)
        self.exited = ~self.exists
        self.alive = self.exists.copy()
        self._alive_idx = self._info = self._batch = None
        for r in self.registers.values():
            r[...] = 0
        self.wep[...] = 0
        self.shared = SharedMemory(self.B, self.shared_size, self.shared_vars, self.granule)
        self.shared.pending = np.zeros(len(self.shared.writer), dtype=np.int32)
        self.async_queue = []
        self.async_commits = np.zeros(self.L, dtype=np.int64)
        self.update_keys()
        self.local = LocalMemory(self.L, self.local_size)
        self._execute()

    def _execute(self):
        """Run the chunk; a form whose builder accepts it but whose run meets a case it does not implement
        (``Unsupported`` at run time) is the clean "unsupported" finding of that instruction, as at build time."""
        self._op = None
        try:
            self._issue_all()
        except Unsupported as e:
            op = self._op
            self.unsupported(op.ins, str(e), None) if op is not None else self.fault("unsupported", str(e), None, None)

    def _issue_all(self):
        ops = self.ops
        groups = {0: [self.exists.copy(), int(self.exists.sum())]}
        self.n_alive = groups[0][1]
        bar_wait = np.zeros(self.L, dtype=bool)
        bar_pc = np.zeros(self.L, dtype=np.int64)
        coll_wait: dict = {}
        limit = self.max_issues
        build = self.compiler.build
        end = len(ops)
        runs = self._runs

        def add(pc, mask, count):
            g = groups.get(pc)
            if g is None:
                groups[pc] = [mask, count]
            else:
                g[0] = g[0] | mask
                g[1] += count

        while True:
            if not groups:
                if coll_wait:
                    pc = min(coll_wait)
                    mask = coll_wait.pop(pc)
                    self._op = ops[pc]
                    self._partial_collective(ops[pc], mask)
                    ops[pc].fn(mask)
                    self._count_flops(pc, 1, int(mask.sum()))
                    add(pc + 1, mask, int(mask.sum()))
                    continue
                if bar_wait.any():
                    self._release(bar_wait, bar_pc, add)
                    continue
                return
            pc = min(groups)
            mask, count = groups.pop(pc)
            # The group runs alone, one issue per instruction, while its pc stays below every other group's
            # (the loop over groups would pick it again); it goes back into ``groups`` where that ends.
            stop = min(groups) if groups else end
            arg = None if count == self.n_alive else mask
            while True:
                op = ops[pc]
                if op is None:
                    op = ops[pc] = build(pc)
                kind = op.kind
                if kind == PLAIN:
                    # The straight run of plain instructions from pc (program.Compiler never puts a branch, barrier,
                    # exit or collective in one), run back to back: the same issues, one per instruction.
                    run = runs[pc]
                    if run is None:
                        run = runs[pc] = self._straight(pc)
                    fns, segments = run
                    k = len(fns)
                    if k > stop - pc:
                        k = stop - pc
                    if k > limit - self.issued:
                        k = limit - self.issued
                    if k > 1:
                        i = 0
                        try:
                            if segments is not None:
                                # its fused segments (fusion.py) where they lie wholly within the k instructions to
                                # run and can run, else the closures
                                for first, n, seg in segments:
                                    if i + n > k:
                                        n, seg = k - i, None
                                        if n <= 0:
                                            break
                                    if seg is not None and seg.run(arg):
                                        i += n
                                        continue
                                    for fn in fns[i:i + n]:
                                        fn(arg)
                                        i += 1
                            else:
                                for fn in (fns if k == len(fns) else fns[:k]):
                                    fn(arg)
                                    i += 1
                        except BaseException:
                            self.issued += i + 1
                            self._op = ops[pc + i]
                            raise
                        self.issued += k
                        self._count_flops(pc, k, count)
                        pc += k
                        self._op = ops[pc - 1]
                        if pc >= stop:
                            add(pc, mask, count)
                            break
                        continue
                self._op = op
                self.issued += 1
                if self.issued > limit:
                    self.fault("timeout", f"ядро не завершилось за {limit} шагов эмулятора: бесконечный цикл?",
                               int(np.flatnonzero(mask)[0]), op.ins)
                if kind == PLAIN:
                    op.fn(arg)
                    self._count_flops(pc, 1, count)
                    pc += 1
                elif kind == BRANCH:
                    if op.fn is not None:
                        taken = mask & op.fn()
                        nt = int(nnz(taken))
                        if nt == 0:
                            pc += 1
                            if pc < stop:
                                continue
                            add(pc, mask, count)
                            break
                        if nt != count:
                            add(op.target, taken, nt)
                            add(pc + 1, mask & ~taken, count - nt)
                            break
                    pc = op.target
                elif kind == EXIT:
                    self.exited |= mask
                    self.alive &= ~mask
                    self.n_alive -= count
                    self._alive_idx = self._info = None
                    break
                elif kind == BARRIER:
                    bar_wait |= mask
                    bar_pc[mask] = pc
                    break
                else:  # COLLECTIVE
                    waiting = coll_wait.pop(pc, None)
                    part = mask if waiting is None else (mask | waiting)
                    ready = op.ready(part)
                    nr = int(nnz(ready))
                    if nr:
                        op.fn(ready)
                        self._count_flops(pc, 1, nr)
                        add(pc + 1, ready, nr)
                    if nr < int(nnz(part)):
                        coll_wait[pc] = part & ~ready
                    break
                if pc >= stop:
                    add(pc, mask, count)
                    break

    def _count_flops(self, pc: int, k: int, threads: int) -> None:
        """Instructions pc .. pc + k - 1 issued by ``threads`` threads: their floating-point operations."""
        cuda, tensor = self._flops, self._tensor_flops
        self.flops += threads * (cuda[pc + k] - cuda[pc])
        self.tensor_flops += threads * (tensor[pc + k] - tensor[pc])

    def _straight(self, pc):
        """The closures of the plain instructions from ``pc`` on (at most :data:`_STRAIGHT`), up to the first that is
        not plain; each op built as :meth:`_issue_all` would build it on reaching it.  A cp.async (its builder marks
        the machine as using asynchronous copies) or an instruction whose builder fails ends the run unbuilt."""
        ops, build, instructions = self.ops, self.compiler.build, self.kernel.instructions
        fns = []
        j = pc
        while len(fns) < _STRAIGHT:
            op = ops[j]
            if op is None:
                if instructions[j].mnemonic == "cp":
                    break
                try:
                    op = build(j)
                except Exception:
                    break
                ops[j] = op
            if op.kind != PLAIN:
                break
            fns.append(op.fn)
            j += 1
        return tuple(fns), self._segments(pc, j)

    def _segments(self, start, end):
        """The fused segments (fusion.py) of the straight run ``start .. end - 1`` as (first, count, Segment or
        None) in order; None where the run has none."""
        if not self.fuse or end - start < fusion.MIN_SEGMENT:
            return None
        contracted = derived(self.kernel, "contractions", contractions) if self.contract else {}
        plans = derived(self.kernel, "fusion_plans", lambda k: {})
        key = (start, end, self.contract)
        if key not in plans:
            plans[key] = fusion.plan_run(self.kernel, contracted, start, end)
        out = []
        for first, n, plan in plans[key]:
            if plan is not None and (plan.count * self.L > fusion.MAX_ELEMENTS
                                     or any(self.ops[j].unsupported for j in range(first, first + n))):
                plan = None
            seg = fusion.Segment(self, self.compiler, plan) if plan is not None else None
            if out and seg is None and out[-1][2] is None:
                out[-1] = (out[-1][0], out[-1][1] + n, None)
            else:
                out.append((first, n, seg))
        return out if any(seg is not None for _, _, seg in out) else None

    def _partial_collective(self, op, mask):
        present = self.warp_bits(mask)
        existing = self.warp_bits(self.exists)
        w = int(np.flatnonzero(present)[0])
        lane = w * 32 + int(np.flatnonzero(mask[w * 32:(w + 1) * 32])[0])
        mm = np.asarray(op.member()) if op.member is not None else np.uint32(0xFFFFFFFF)
        mm = int(mm if mm.ndim == 0 else mm[lane]) & 0xFFFFFFFF
        here = bin(int(present[w])).count("1")
        named = bin(int(existing[w]) & mm).count("1")
        self.fault("partial_warp_collective",
                   f"операцию над варпом (__shfl_sync, __ballot_sync, __syncwarp …) выполнили только {here} из {named} "
                   "потоков варпа, названных её маской: остальные пошли по другой ветке или вышли; на GPU результат "
                   "не определён", lane, op.ins)

    def _release(self, bar_wait, bar_pc, add):
        B = self.B
        waiting = bar_wait.copy()
        per_block = np.bincount(self.slot[waiting], minlength=B)
        gone = np.bincount(self.slot[self.exited & self.exists], minlength=B)
        bad = (per_block > 0) & (gone > 0)
        pcs = np.unique(bar_pc[waiting])
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            lane = int(np.flatnonzero(waiting & (self.slot == k))[0])
            self.fault("barrier_after_exit",
                       f"__syncthreads() ждут {int(per_block[k])} потоков блока, а {int(gone[k])} потоков этого блока "
                       "уже вышли из ядра, не дойдя до него (return раньше барьера или __syncthreads() внутри if, который "
                       "они обошли): барьер должны пройти все потоки блока",
                       lane, self.ops[int(bar_pc[lane])].ins)
        if len(pcs) > 1:
            seen = np.zeros(B, dtype=np.int64)
            for pc in pcs:
                seen += np.bincount(self.slot[waiting & (bar_pc == pc)], minlength=B) > 0
            if (seen > 1).any():
                k = int(np.flatnonzero(seen > 1)[0])
                sel = waiting & (self.slot == k)
                lines = sorted({self.ops[int(p)].ins.line for p in np.unique(bar_pc[sel])} - {None})
                lane = int(np.flatnonzero(sel)[0])
                self.fault("divergent_barrier",
                           "потоки одного блока ждут на разных __syncthreads()"
                           + (f" (строки {', '.join(map(str, lines))})" if lines else "")
                           + ": барьер внутри ветвления, по которому потоки блока пошли по-разному; на GPU это "
                             "зависание или неопределённое поведение", lane, self.ops[int(bar_pc[lane])].ins)
        self.shared.advance(per_block > 0)
        self.update_keys()
        for pc in pcs:
            sel = waiting & (bar_pc == pc)
            add(int(pc) + 1, sel, int(sel.sum()))
        bar_wait[...] = False
