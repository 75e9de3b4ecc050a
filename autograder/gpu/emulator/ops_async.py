"""Asynchronous copies (sm_80): cp.async.{ca,cg}.shared.global, cp.async.commit_group, cp.async.wait_group,
cp.async.wait_all.

A copy reads its global source when issued (bounds-checked then) and lands in shared memory only when its
thread waits for its commit group; until then the destination keeps its old bytes, and reading them is a
``cp_async_pending`` finding.  Landing counts as the issuing thread's write at that moment (for races)."""
from __future__ import annotations

import numpy as np

from .errors import Unsupported
from .ops_memory import _address
from .program import PLAIN, Op, opcode

_HINTS = ("ca", "cg", "shared", "global", "shared::cta", "L2::64B", "L2::128B", "L2::256B", "L2::cache_hint")


@opcode("cp")
def build_cp(ins, c):
    parts = ins.parts[1:]
    if not parts or parts[0] != "async":
        raise Unsupported("cp form")
    rest = parts[1:]
    machine = c.m
    machine.uses_async = True
    if rest == ("commit_group",):
        def commit(m):
            machine.async_commit(machine.lanes_of(m))
        return Op(PLAIN, commit)
    if rest in (("wait_group",), ("wait_all",)):
        n = 0
        if rest == ("wait_group",):
            if not ins.operands or ins.operands[0].kind != "imm":
                raise Unsupported("cp.async.wait_group without an immediate count")
            n = int(ins.operands[0].value)
        every = rest == ("wait_all",)

        def wait(m):
            idx = machine.lanes_of(m)
            if every:
                machine.async_commit(idx)
            machine.async_wait(idx, n, ins)
        return Op(PLAIN, wait)
    if "shared" not in rest and "shared::cta" not in rest or "global" not in rest or set(rest) - set(_HINTS):
        raise Unsupported("cp.async form " + ".".join(rest))
    ops = ins.operands
    if len(ops) not in (3, 4) or ops[2].kind != "imm" or ops[2].value not in (4, 8, 16):
        raise Unsupported("cp.async operands")
    size = int(ops[2].value)
    if "cg" in rest and size != 16:
        raise Unsupported("cp.async.cg needs 16 bytes")
    dst, src = _address(c, ops[0]), _address(c, ops[1])
    src_size = c.src(ops[3], "u32") if len(ops) == 4 else None

    def issue(m):
        idx = machine.lanes_of(m)
        if len(idx) == 0:
            return
        d, s = np.asarray(dst()), np.asarray(src())
        d = np.full(len(idx), d) if d.ndim == 0 else d[idx]
        s = np.full(len(idx), s) if s.ndim == 0 else s[idx]
        n = None
        if src_size is not None:
            v = np.asarray(src_size())
            n = np.minimum(np.full(len(idx), v) if v.ndim == 0 else v[idx], size).astype(np.int64)
        machine.async_issue(idx, d.astype(np.int64), s.astype(np.uint64), size, n, ins)
    return Op(PLAIN, issue)
