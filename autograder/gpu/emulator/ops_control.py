"""Control and warp-collective instructions: bra, ret, exit, bar.sync / barrier.sync, bar.warp.sync, membar and
fence (no-ops: the emulator's memory is sequentially consistent), shfl.sync, vote.sync, activemask."""
from __future__ import annotations

import numpy as np

from .errors import Unsupported
from .program import BARRIER, BRANCH, COLLECTIVE, EXIT, PLAIN, Op, opcode


@opcode("bra")
def build_bra(ins, c):
    if set(ins.parts[1:]) - {"uni"}:
        raise Unsupported("bra modifier")
    target = ins.operands[0]
    if target.kind != "sym" or target.value not in c.kernel.labels:
        raise Unsupported(f"branch target {target.text}")
    return Op(BRANCH, c.guard(ins), target=c.kernel.labels[target.value])


@opcode("ret", "exit")
def build_ret(ins, c):
    if ins.guard is not None:
        raise Unsupported("predicated return")
    return Op(EXIT, None)


@opcode("bar", "barrier")
def build_bar(ins, c):
    parts = ins.parts[1:]
    if parts and parts[0] == "warp":
        if parts[1:] != ("sync",):
            raise Unsupported("bar.warp form")
        mm = c.src(ins.operands[0], "b32")
        machine = c.m

        def run(mask):
            machine.wep[mask] += 1
            machine.update_keys()
        return Op(COLLECTIVE, run, ready=lambda part: machine.ready(part, mm()), member=mm)
    if set(parts) - {"sync", "cta", "aligned"} or "sync" not in parts:
        raise Unsupported("barrier form " + ".".join(parts))
    if len(ins.operands) != 1:
        raise Unsupported("barrier with a thread count")
    return Op(BARRIER, None)


@opcode("membar", "fence", "nanosleep")
def build_fence(ins, c):
    return Op(PLAIN, lambda m: None)


@opcode("shfl")
def build_shfl(ins, c):
    parts = ins.parts[1:]
    if "sync" not in parts or parts[-1] != "b32" or len(parts) != 3:
        raise Unsupported("shfl form " + ".".join(parts))
    mode = parts[1]
    if mode not in ("up", "down", "bfly", "idx"):
        raise Unsupported(f"shfl.{mode}")
    dst = ins.operands[0]
    d = c.dst(dst, "b32")
    p = c.dst(dst.pair, "pred") if dst.pair is not None else None
    a, b, cc, mm = (c.src(o, "b32") for o in ins.operands[1:5])
    machine = c.m
    lane = machine.laneid.astype(np.int64)
    base = np.arange(machine.L, dtype=np.int64) - lane

    def run(mask):
        bval = np.asarray(b()).astype(np.int64) & 31
        cv = np.asarray(cc()).astype(np.int64)
        cval, seg = cv & 31, (cv >> 8) & 31
        max_lane = (lane & seg) | (cval & ~seg)
        min_lane = lane & seg
        if mode == "up":
            j = lane - bval
            ok = j >= max_lane
        elif mode == "down":
            j = lane + bval
            ok = j <= max_lane
        elif mode == "bfly":
            j = lane ^ bval
            ok = j <= max_lane
        else:
            j = min_lane | (bval & ~seg)
            ok = j <= max_lane
        src = base + np.where(ok, j, lane)
        bad = mask & ~mask[src]
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            machine.fault("partial_warp_collective",
                          f"__shfl_sync: поток (дорожка {int(lane[i])}) читает значение дорожки {int(src[i] - base[i])}, "
                          "которая в этой операции не участвует (вне маски, вышла или не существует): на GPU "
                          "значение не определено", i, ins, int(bad.sum()))
        v = np.asarray(a())
        if v.ndim == 0:
            v = np.full(machine.L, v)
        d(v[src], mask)
        if p is not None:
            p(ok, mask)
    return Op(COLLECTIVE, run, ready=lambda part: machine.ready(part, mm()), member=mm)


@opcode("vote")
def build_vote(ins, c):
    parts = ins.parts[1:]
    if "sync" not in parts:
        raise Unsupported("vote without .sync")
    mode = next((x for x in parts if x in ("ballot", "all", "any", "uni")), None)
    if mode is None:
        raise Unsupported("vote mode")
    machine = c.m
    d = c.dst(ins.operands[0], "b32" if mode == "ballot" else "pred")
    a = c.src(ins.operands[1], "pred")
    mm = c.src(ins.operands[2], "b32")

    def run(mask):
        v = np.asarray(a())
        if v.ndim == 0:
            v = np.full(machine.L, bool(v))
        yes = machine.warp_bits(mask & v)
        if mode == "ballot":
            d(np.repeat(yes, 32).astype(np.uint32), mask)
            return
        here = machine.warp_bits(mask)
        if mode == "all":
            r = yes == here
        elif mode == "any":
            r = yes != 0
        else:
            r = (yes == here) | (yes == 0)
        d(np.repeat(r, 32), mask)
    return Op(COLLECTIVE, run, ready=lambda part: machine.ready(part, mm()), member=mm)


@opcode("activemask")
def build_activemask(ins, c):
    machine = c.m
    d = c.dst(ins.operands[0], "b32")

    def run(m):
        mask = ~machine.exited if m is None else m
        d(np.repeat(machine.warp_bits(mask), 32).astype(np.uint32), m)
    return Op(PLAIN, run)


@opcode("redux")
def build_redux(ins, c):
    """redux.sync.{add,min,max}.{u32,s32} and redux.sync.{and,or,xor}.b32 over the lanes that execute."""
    parts = ins.parts[1:]
    if "sync" not in parts or len(parts) != 3:
        raise Unsupported("redux form")
    op, t = parts[1], parts[2]
    if (op in ("add", "min", "max") and t not in ("u32", "s32")) or (op in ("and", "or", "xor") and t != "b32") \
            or op not in ("add", "min", "max", "and", "or", "xor"):
        raise Unsupported(f"redux.{op}.{t}")
    machine = c.m
    d = c.dst(ins.operands[0], t)
    a = c.src(ins.operands[1], t)
    mm = c.src(ins.operands[2], "b32")
    dt = np.int64 if t == "s32" else np.uint64
    neutral = {"add": 0, "min": np.iinfo(np.int32).max if t == "s32" else 0xFFFFFFFF,
               "max": np.iinfo(np.int32).min if t == "s32" else 0, "and": 0xFFFFFFFF, "or": 0, "xor": 0}[op]
    ufunc = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
             "xor": np.bitwise_xor}[op]

    def run(mask):
        v = np.asarray(a())
        if v.ndim == 0:
            v = np.full(machine.L, v)
        w = np.where(mask, v.astype(dt), dt(neutral)).reshape(-1, 32)
        r = ufunc.reduce(w, axis=1)
        out = np.repeat(r, 32).astype(np.uint64 if t != "s32" else np.int64)
        d(out.astype(np.int32) if t == "s32" else (out & np.uint64(0xFFFFFFFF)).astype(np.uint32), mask)
    return Op(COLLECTIVE, run, ready=lambda part: machine.ready(part, mm()), member=mm)


@opcode("match")
def build_match(ins, c):
    """match.any.sync.b32/.b64 d, a, mask (lanes holding the same value) and match.all.sync d[|p], a, mask."""
    parts = ins.parts[1:]
    if "sync" not in parts or parts[0] not in ("any", "all") or parts[-1] not in ("b32", "b64"):
        raise Unsupported("match form")
    machine = c.m
    dst = ins.operands[0]
    d = c.dst(dst, "b32")
    p = c.dst(dst.pair, "pred") if dst.pair is not None else None
    a = c.src(ins.operands[1], parts[-1])
    mm = c.src(ins.operands[2], "b32")
    weights = (np.uint64(1) << np.arange(32, dtype=np.uint64))

    def run(mask):
        v = np.asarray(a())
        if v.ndim == 0:
            v = np.full(machine.L, v)
        vw = v.reshape(-1, 32)
        mw = mask.reshape(-1, 32)
        same = (vw[:, :, None] == vw[:, None, :]) & mw[:, None, :]
        bits = (same * weights).sum(axis=2, dtype=np.uint64).reshape(-1)
        if parts[0] == "any":
            d(bits.astype(np.uint32), mask)
            return
        here = np.repeat(machine.warp_bits(mask), 32)
        all_same = bits == here
        d(np.where(all_same, here, np.uint64(0)).astype(np.uint32), mask)
        if p is not None:
            p(all_same, mask)
    return Op(COLLECTIVE, run, ready=lambda part: machine.ready(part, mm()), member=mm)
