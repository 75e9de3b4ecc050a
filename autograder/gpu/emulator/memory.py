"""The memories of a launch: global (an arena of exact allocations), shared (per block, with shadow state for
races and uninitialised reads), local (per thread) and the kernel's parameters.

Every access comes in as NumPy arrays over the lanes taking part (lane numbers and addresses) and is checked
before it touches anything; a fault is reported through the machine (:meth:`Machine.fault`), which stops the
run for out-of-bounds and misaligned accesses.

Addresses.  Generic addresses are 64-bit: global allocations live at :data:`GLOBAL_BASE` and above, each
followed by :data:`GAP` unmapped bytes, so no access can stray from one array into its neighbour unnoticed;
the shared window starts at :data:`SHARED_WINDOW` (``cvta.shared`` adds it), the local window at
:data:`LOCAL_WINDOW`.
"""
from __future__ import annotations

import re

import numpy as np

from .rounding import nnz

GLOBAL_BASE = 0x7F00_0000_0000
GAP = 64 * 1024
ALLOC_ALIGN = 256
SHARED_WINDOW = 0x0000_1000_0000_0000
LOCAL_WINDOW = 0x0000_2000_0000_0000
WINDOW_SIZE = 1 << 32

# Shadow words of shared memory (one int64 per byte, for the last writer and for the readers of an epoch):
# bits 0-17 thread number + 1 (0: nobody), 18 several readers, 19 readers from several warps,
# 20-39 the warp-sync count of the accessing lane, 40-62 the block's barrier epoch.
TID_MASK = (1 << 18) - 1
MULTI = 1 << 18
MIXED = 1 << 19
WEP_SHIFT, WEP_MASK = 20, (1 << 20) - 1
EPOCH_SHIFT = 40
ATOMIC_WRITER = TID_MASK  # epoch 0: initialised, never racing
#: Granules of queued reads (SharedMemory.track_read) after which they are recorded without waiting for a write.
MAX_QUEUED = 1 << 22

_DTYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def demangle(name: str) -> str:
    """``_ZZ8row_sumsE7partial`` -> ``partial`` (the name of a function-local static); others unchanged."""
    m = re.search(r"E(\d+)([A-Za-z_]\w*)$", name)
    if m and len(m.group(2)) >= int(m.group(1)):
        return m.group(2)[: int(m.group(1))]
    return name


def _describe_array(a: np.ndarray) -> str:
    shape = "×".join(str(s) for s in a.shape) or "скаляр"
    return f"{a.dtype}[{shape}], {a.nbytes} Б"


def allocation_of(array: np.ndarray) -> tuple[np.ndarray, int]:
    """The memory an array argument points into, as a GPU sees it, and the byte offset of its element 0.

    CuPy passes a view (a slice, a transpose, a reshape) as a pointer into the memory of the array it views: the
    kernel reads that memory with its own indexing, whatever the view's strides, and two arguments viewing one
    array share it.  So the allocation is the outermost array the view's chain of ``base`` reaches, when that
    one's memory is one contiguous block (C or Fortran order); otherwise the argument alone, as its C-order copy.
    """
    root = array
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root is array or not (root.flags.c_contiguous or root.flags.f_contiguous):
        return array, 0
    offset = array.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    if not 0 <= offset <= root.nbytes:  # not a view into root's block after all
        return array, 0
    return root, offset


def _bytes_of(array: np.ndarray) -> np.ndarray:
    """An array's memory as bytes, in memory order (a view where the array is one contiguous block)."""
    if array.flags.c_contiguous or array.flags.f_contiguous:
        return array.reshape(-1, order="A").view(np.uint8)
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def _first_across_warps(race, other, this) -> int:
    """The first racing access of ``race`` whose two threads (ids + 1 in ``other`` and ``this``) are in different
    warps, else the first one: a race across warps needs ``__syncthreads()``, one inside a warp ``__syncwarp()``,
    and the finding names the stronger need."""
    across = race & (((other - 1) >> 5) != ((this - 1) >> 5))
    return int(np.flatnonzero(across if across.any() else race)[0])


class GlobalArena:
    """The kernel's allocations (:func:`allocation_of` of its array arguments, each once), each its own block of
    memory; bytes outside every allocation do not exist.  ``positions[k]`` is the first argument pointing into
    allocation ``k``."""

    def __init__(self, arrays: list[tuple[int, np.ndarray]]):
        self.positions, self.arrays, starts, sizes = [], [], [], []
        address = GLOBAL_BASE + GAP
        for position, array in arrays:
            starts.append(address)
            sizes.append(array.nbytes)
            self.positions.append(position)
            self.arrays.append(array)
            address = -(-(address + array.nbytes) // ALLOC_ALIGN) * ALLOC_ALIGN + GAP
        self.starts = np.array(starts, dtype=np.uint64)
        self.ends = self.starts + np.array(sizes, dtype=np.uint64)
        self.data = np.zeros(address - GLOBAL_BASE, dtype=np.uint8)
        for start, array in zip(starts, self.arrays):
            off = start - GLOBAL_BASE
            self.data[off:off + array.nbytes] = _bytes_of(array)

    def where(self, address: int) -> str:
        """Russian: which argument array and byte offset an address (inside an allocation) is."""
        k = int(np.searchsorted(self.starts, np.uint64(address), side="right")) - 1
        return f"массив args[{self.positions[k]}] вызова ядра, байт {address - int(self.starts[k])}"

    def address_of(self, k: int) -> int:
        return int(self.starts[k])

    def write_back(self) -> None:
        """Copy every allocation back into its array (read-only arrays are left alone: the kernel may not have
        written them; if it did, :attr:`written_read_only` names them)."""
        self.written_read_only = []
        for k, (start, array) in enumerate(zip(self.starts.tolist(), self.arrays)):
            off = start - GLOBAL_BASE
            if not array.flags.writeable:
                if not np.array_equal(self.data[off:off + array.nbytes], _bytes_of(array)):
                    self.written_read_only.append(self.positions[k])
                continue
            data = self.data[off:off + array.nbytes]
            if array.flags.c_contiguous or array.flags.f_contiguous:
                array.reshape(-1, order="A").view(np.uint8)[...] = data
            else:
                array[...] = data.view(array.dtype).reshape(array.shape)

    def within_one(self, addr: np.ndarray, size: int) -> bool:
        """Whether every access of ``size`` bytes at ``addr`` lies inside one and the same allocation."""
        if len(self.starts) == 0 or len(addr) == 0:
            return len(addr) == 0
        lo, hi = addr.min(), addr.max()
        k = int(np.searchsorted(self.starts, lo, side="right")) - 1
        return k >= 0 and lo >= self.starts[k] and hi + np.uint64(size) <= self.ends[k]

    def locate(self, addr: np.ndarray, size: int) -> np.ndarray:
        """Which allocation each address falls in (-1 where the access is not wholly inside one)."""
        if len(self.starts) == 0:
            return np.full(addr.shape, -1, dtype=np.int64)
        k = np.searchsorted(self.starts, addr, side="right").astype(np.int64) - 1
        kk = np.maximum(k, 0)
        ok = (k >= 0) & (addr >= self.starts[kk]) & (addr + np.uint64(size) <= self.ends[kk])
        return np.where(ok, k, -1)

    def explain(self, address: int, size: int, write: bool) -> str:
        """Russian: where an access of ``size`` bytes at ``address`` lands relative to the arrays."""
        what = "запись" if write else "чтение"
        if len(self.starts) == 0:
            return f"{what} {size} Б по адресу 0x{address:x}: у ядра нет ни одного массива-аргумента"
        starts, ends = self.starts.tolist(), self.ends.tolist()
        k = int(np.searchsorted(self.starts, np.uint64(address), side="right")) - 1
        candidates = []
        if k >= 0:
            candidates.append(k)
        if k + 1 < len(starts):
            candidates.append(k + 1)
        best = min(candidates, key=lambda j: (address - ends[j]) if address >= starts[j] else (starts[j] - address))
        name = f"args[{self.positions[best]}] вызова ядра ({_describe_array(self.arrays[best])})"
        rel = address - starts[best]
        if address >= starts[best] and address < ends[best]:
            past = address + size - ends[best]
            return (f"{what} {size} Б по смещению {rel} Б от начала массива — {name}: доступ выходит за конец "
                    f"массива на {past} Б")
        if address >= ends[best]:
            if address - ends[best] > GAP:
                return f"{what} {size} Б по адресу 0x{address:x}: адрес не принадлежит ни одному массиву"
            return (f"{what} {size} Б по смещению {rel} Б от начала массива — {name}: на {address - ends[best]} Б "
                    f"за концом массива")
        if starts[best] - address > GAP:
            return f"{what} {size} Б по адресу 0x{address:x}: адрес не принадлежит ни одному массиву"
        return (f"{what} {size} Б за {starts[best] - address} Б до начала массива — {name} "
                f"(отрицательный индекс?)")


class SharedMemory:
    """Shared memory of the blocks of one chunk: ``size`` bytes per block, with shadow words per granule.

    The granule (1, 2 or 4 bytes) is the smallest shared access the kernel's PTX can make (min over its
    ld/st/atom of shared or generic space): two threads touching different bytes of one granule are never
    both in it, so the granule is exact for races and uninitialised reads."""

    def __init__(self, blocks: int, size: int, variables: list, granule: int = 1):
        self.size = size
        self.stride = max(-(-size // 16) * 16, 16)
        self.blocks = blocks
        self.g = granule
        self.gshift = {1: 0, 2: 1, 4: 2}[granule]
        self.gstride = self.stride // granule
        # A GPU holds garbage in shared memory; reads of bytes never written are reported, the bytes are 0xFF.
        self.data = np.full(blocks * self.stride, 0xFF, dtype=np.uint8)
        n = blocks * self.gstride
        self.writer = np.zeros(n, dtype=np.int64)
        self.reader = np.zeros(n, dtype=np.int64)
        self.writer_pc = np.zeros(n, dtype=np.int32)
        self.reader_pc = np.zeros(n, dtype=np.int32)
        # Per granule, the latest warp-sync count (with the epoch, as in a key, thread bits 0) of the reads by
        # threads other than the summarised reader: a thread that reads and then writes its own element may write
        # once the others' reads are ordered before its __syncwarp() (a warp-synchronous reduction).
        self.others = np.zeros(n, dtype=np.int64)
        self.epoch = np.ones(blocks, dtype=np.int64)
        self.reads: list = []  # reads not yet in the readers' summary (track_read), and their granule count
        self.queued = 0
        # Changes with every write of data or writer words, every epoch step and every queued cp.async: a read
        # computed at one version is the same read at that version (Machine's batched shared reads rely on it).
        self.version = 0
        self.variables = variables  # (offset, size, name) of each shared variable

    def name_of(self, offset: int) -> str:
        for start, size, name in self.variables:
            if start <= offset < start + max(size, 1) or (size == 0 and offset >= start):
                return f"{demangle(name)}, байт {offset - start}"
        return f"байт {offset}"

    # --- shadow state: races between barriers and reads of bytes never written ----------------------------

    def _granules(self, slot, off, size, *per_lane):
        """Granule positions of accesses of ``size`` bytes, and each per-lane array repeated per granule."""
        base = slot * self.gstride + (off >> self.gshift)
        n = max(size >> self.gshift, 1)
        if n == 1:
            return (base, *per_lane)
        b = (base[:, None] + np.arange(n, dtype=np.int64)).reshape(-1)
        return (b, *(np.repeat(a, n) for a in per_lane))

    def _byte(self, g, slot_g):
        return int((g - slot_g * self.gstride) << self.gshift)

    def track_read(self, slot, off, size, ep, key, pc, b=None):
        """Check reads of lanes with shadow keys ``key`` (and block epochs ``ep``, both shifted into place) against
        the writers; the problems found: a list of (kind, index of the lane, other thread, other pc, byte, count).
        ``b``: the granules (:meth:`_granules`), where the caller has them; ``ep`` and ``key`` are then per granule.

        Only the writer words decide a read's findings; the readers' summary (needed by later writes of the same
        epoch) is queued and brought up to date, in program order, by :meth:`flush_reads` before the next write
        looks at it, and dropped when the blocks' epoch advances (a summary of an older epoch is never read)."""
        n = max(size >> self.gshift, 1)
        if b is None:
            b, ep, key = self._granules(slot, off, size, ep, key)
        problems = []
        W = self.writer[b]
        if nnz(W) < len(W):
            never = W == 0
            i = int(np.flatnonzero(never)[0])
            problems.append(("uninitialized_shared", i // n, None, None,
                             self._byte(b[i], slot[i // n]), int(never.sum())))
        same = W >= ep
        if nnz(same):
            s = np.flatnonzero(same)
            Ws, ks = W[s], key[s]
            wt, t1 = Ws & TID_MASK, ks & TID_MASK
            ordered = (((wt - 1) >> 5) == ((t1 - 1) >> 5)) & (((ks >> WEP_SHIFT) & WEP_MASK) >
                                                               ((Ws >> WEP_SHIFT) & WEP_MASK))
            race = (wt != t1) & ~ordered
            if race.any():
                j = _first_across_warps(race, wt, t1)
                i = s[j]
                problems.append(("raw", int(i // n), int(wt[j] - 1), int(self.writer_pc[b[i]]),
                                 self._byte(b[i], slot[i // n]), int(race.sum())))
        self.note_read(b, ep, key, pc, slot)
        return problems

    def note_read(self, b, ep, key, pc, slot):
        """Queue reads of granules ``b`` (found free of problems) for the readers' summary."""
        self.reads.append((b, ep, key, pc, slot))
        self.queued += len(b)
        if self.queued > MAX_QUEUED:
            self.flush_reads()

    def flush_reads(self):
        """Bring the readers' summary up to date with the queued reads (in the order they were made)."""
        reads, self.reads, self.queued = self.reads, [], 0
        for b, ep, key, pc, _ in reads:
            self._record_read(b, ep, key, pc)

    def advance(self, blocks):
        """The epoch of the blocks marked in ``blocks`` (bool per block) advances (a barrier released them).
        Queued reads of those blocks are dropped (their summary would be of an older epoch, which no access
        consults); a queued read touching any other block is recorded."""
        if self.reads:
            stay = ~blocks
            if stay.any():
                reads, self.reads, self.queued = self.reads, [], 0
                touches: dict = {}  # id(slot) -> whether those lanes' blocks stay (reads share slot arrays)
                for b, ep, key, pc, slot in reads:
                    t = touches.get(id(slot))
                    if t is None:
                        t = touches[id(slot)] = bool(stay[slot].any())
                    if t:
                        self._record_read(b, ep, key, pc)
            else:
                self.reads, self.queued = [], 0
        self.epoch[blocks] += 1
        self.version += 1

    def _record_read(self, b, ep, key, pc):
        """The readers' summary after reads of granules ``b`` (keys ``key``, epochs ``ep``) at ``pc``."""
        R = self.reader[b]
        sameR = R >= ep
        self.reader[b] = key
        self.reader_pc[b] = pc
        back = self.reader[b]
        flag = back != key
        if sameR.any():
            t1 = key & TID_MASK
            s = np.flatnonzero(sameR)
            Rs = R[s]
            rt = Rs & TID_MASK
            before = s[rt != t1[s]]  # the summarised reader was another thread: it joins the others
            if len(before):
                self._note_others(b[before], R[before], ep[before] if np.ndim(ep) else ep)
            multi = (rt != t1[s]) | ((Rs & MULTI) != 0)
            mixed = (((rt - 1) >> 5) != ((t1[s] - 1) >> 5)) | ((Rs & MIXED) != 0)
            carry = np.where(multi, MULTI, 0) | np.where(mixed, MIXED, 0)
            if carry.any():
                np.bitwise_or.at(self.reader, b[s], carry)  # duplicates must all land
        if flag.any():
            t1 = key & TID_MASK
            s = np.flatnonzero(flag)
            bt = back[s] & TID_MASK
            s = s[bt != t1[s]]
            if len(s):
                self._note_others(b[s], key[s], ep[s] if np.ndim(ep) else ep)  # lanes of one read: each other's
                bt = back[s] & TID_MASK
                self.reader[b[s]] |= MULTI
                mixed2 = ((bt - 1) >> 5) != ((t1[s] - 1) >> 5)
                if mixed2.any():
                    self.reader[b[s[mixed2]]] |= MIXED

    def _note_others(self, granules, keys, ep) -> None:
        """Granules ``granules`` were read by other threads than their summarised reader, with ``keys``."""
        stamp = keys & ~np.int64(TID_MASK | MULTI | MIXED)
        current = self.others[granules]
        self.others[granules] = np.where(current >= ep, current, 0)  # an older epoch's count is no count
        np.maximum.at(self.others, granules, stamp)

    def track_write(self, slot, off, size, ep, key, pc):
        self.version += 1
        if self.reads:
            self.flush_reads()
        n = max(size >> self.gshift, 1)
        lane = np.arange(len(slot))
        b, ep, key, lane = self._granules(slot, off, size, ep, key, lane)
        problems = []
        t1 = key & TID_MASK
        kw = (key >> WEP_SHIFT) & WEP_MASK
        W = self.writer[b]
        same = W >= ep
        if same.any():
            s = np.flatnonzero(same)
            wt = W[s] & TID_MASK
            ordered = (((wt - 1) >> 5) == ((t1[s] - 1) >> 5)) & (kw[s] > ((W[s] >> WEP_SHIFT) & WEP_MASK))
            waw = (wt != t1[s]) & ~ordered
            if waw.any():
                j = _first_across_warps(waw, wt, t1[s])
                i = s[j]
                problems.append(("waw", int(lane[i]), int(wt[j] - 1), int(self.writer_pc[b[i]]),
                                 self._byte(b[i], slot[lane[i]]), int(waw.sum())))
        R = self.reader[b]
        sameR = R >= ep
        if sameR.any():
            s = np.flatnonzero(sameR)
            Rs = R[s]
            rt = Rs & TID_MASK
            others = self.others[b[s]]
            others_wep = np.where(others >= ep[s] if np.ndim(ep) else others >= ep, (others >> WEP_SHIFT) & WEP_MASK, -1)
            latest_wep = (Rs >> WEP_SHIFT) & WEP_MASK
            # ordered: every other reader of this epoch is of the writer's warp and read before its last __syncwarp()
            # (the writer's own read, when it is the summarised reader, orders nothing and needs nothing)
            before_sync = np.where(rt == t1[s], kw[s] > others_wep, kw[s] > np.maximum(latest_wep, others_wep))
            ordered = ((Rs & MIXED) == 0) & (((rt - 1) >> 5) == ((t1[s] - 1) >> 5)) & before_sync
            war = ((rt != t1[s]) | ((Rs & MULTI) != 0)) & ~ordered
            if war.any():
                mixed = (Rs & MIXED) != 0  # readers of several warps: the one summarised may not be the racing one
                j = _first_across_warps(war, np.where(mixed, TID_MASK, rt), t1[s])
                i = s[j]
                other = int(rt[j] - 1) if rt[j] != t1[i] and not mixed[j] else None
                problems.append(("war", int(lane[i]), other, int(self.reader_pc[b[i]]),
                                 self._byte(b[i], slot[lane[i]]), int(war.sum())))
        self.writer[b] = key
        self.writer_pc[b] = pc
        back = self.writer[b]
        dup = (back & TID_MASK) != t1
        if dup.any():
            i = int(np.flatnonzero(dup)[0])
            problems.append(("waw", int(lane[i]), int((back[i] & TID_MASK) - 1), pc,
                             self._byte(b[i], slot[lane[i]]), int(dup.sum())))
        return problems

    def track_atomic(self, slot, off, size):
        """Atomics take no part in races; they read (uninitialised bytes are reported) and initialise."""
        self.version += 1
        lane = np.arange(len(slot))
        b, lane = self._granules(slot, off, size, lane)
        problems = []
        never = self.writer[b] == 0
        if never.any():
            i = int(np.flatnonzero(never)[0])
            problems.append(("uninitialized_shared", int(lane[i]), None, None, self._byte(b[i], slot[lane[i]]),
                             int(never.sum())))
        self.writer[b[never]] = ATOMIC_WRITER
        return problems


class LocalMemory:
    """``.local`` memory: ``size`` bytes per lane (per thread)."""

    def __init__(self, lanes: int, size: int):
        self.size = size
        self.stride = max(-(-size // 16) * 16, 16)
        self.data = np.zeros(lanes * self.stride, dtype=np.uint8)
