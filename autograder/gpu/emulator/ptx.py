"""Reading PTX text: kernels, their parameters, registers, shared and local variables, instructions, labels.

NVRTC writes one statement per line; this reader relies on that (and on ``;`` ending every instruction).
Only what the emulator needs is kept: for each ``.entry``, its ``.param`` list, its ``.reg`` declarations,
its ``.shared`` / ``.local`` variables (module-level ``.shared`` and ``.extern .shared`` too) and its
instructions, each with the CUDA source line of the ``.loc`` before it.
"""
from __future__ import annotations

import dataclasses
import re

from .errors import Unsupported

#: Widths in bits of the PTX fundamental types.
TYPE_BITS = {
    "pred": 1, "b8": 8, "u8": 8, "s8": 8, "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16,
    "b32": 32, "u32": 32, "s32": 32, "f32": 32, "f16x2": 32, "bf16x2": 32, "tf32": 32,
    "b64": 64, "u64": 64, "s64": 64, "f64": 64, "b128": 128,
}


@dataclasses.dataclass
class Operand:
    """One operand.  ``kind``: reg, imm (int), fimm (raw bits of a float literal, with ``bits``), sym
    (a variable or parameter name), label, addr (``base`` operand + ``offset``), vec (``items``), sink (``_``)."""

    kind: str
    text: str
    value: object = None  # reg: name; imm: int; fimm: int bits; sym/label: name
    bits: int = 0  # fimm: 32 or 64
    offset: int = 0  # addr
    base: "Operand | None" = None  # addr
    items: tuple = ()  # vec
    neg: bool = False  # a predicate operand written !%p
    pair: "Operand | None" = None  # d|p destination: the predicate half


@dataclasses.dataclass
class Instruction:
    index: int
    opcode: str  # e.g. "ld.global.nc.v4.f32"
    parts: tuple  # opcode split at dots: ("ld", "global", "nc", "v4", "f32")
    operands: tuple
    guard: str | None  # predicate register name of @%p / @!%p
    guard_neg: bool
    text: str  # the statement as written (no trailing ;)
    line: int | None  # CUDA source line (from .loc), None where unknown

    @property
    def mnemonic(self) -> str:
        return self.parts[0]


@dataclasses.dataclass
class Variable:
    name: str
    space: str  # shared or local
    align: int
    size: int  # bytes; 0 for extern (dynamic) shared
    extern: bool = False


@dataclasses.dataclass
class Param:
    name: str
    type: str
    size: int
    align: int


@dataclasses.dataclass
class Kernel:
    name: str
    params: list
    registers: dict  # name -> type (e.g. "%f3" -> "f32")
    variables: list  # Variables declared in the kernel and at module level
    instructions: list
    labels: dict  # label -> instruction index
    source_file: str | None = None


_COMMENT = re.compile(r"//.*?$|/\*.*?\*/", re.S | re.M)
_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\((.*?)\)\s*(?:\.[\w]+[^{]*)?\{", re.S)
_REG = re.compile(r"\.reg\s+(?:\.v\d\s+)?\.(\w+)\s+(.*)")
_VAR = re.compile(r"(\.extern\s+)?\.(shared|local)\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+([\w$]+)\s*((?:\[\d*\])*)")
_LOC = re.compile(r"\.loc\s+(\d+)\s+(\d+)")
_FILE = re.compile(r'\.file\s+(\d+)\s+"([^"]*)"')
_BRACE = re.compile(r"[{}]")
_LABEL = re.compile(r"^([\w$]+):\s*(.*)$")


def _split_operands(text: str) -> list[str]:
    if "[" not in text and "{" not in text and "]" not in text and "}" not in text:  # no nesting: split at commas
        out = [t.strip() for t in text.split(",")]
        if not out[-1]:
            out.pop()
        return out
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


# The operands' forms: an integer, an address [reg+offset], an absolute address, f32 and f64 bit patterns
# (0f..., 0d...), a decimal float, a symbol.
_INT, _ADDR, _ABS_ADDR, _F32, _F64, _DEC, _SYM = map(re.compile, (
    r"^-?(0[xX][0-9a-fA-F]+|\d+)U?$",
    r"^([%\w$.]+?)(?:\+(-?(?:0[xX][0-9a-fA-F]+|\d+)))?$",
    r"^(-?(?:0[xX][0-9a-fA-F]+|\d+))$",
    r"^0[fF][0-9a-fA-F]{8}$",
    r"^0[dD][0-9a-fA-F]{16}$",
    r"^-?\d*\.\d+(e[-+]?\d+)?$",
    r"^[A-Za-z_][\w$]*$"))


def parse_operand(text: str) -> Operand:
    text = text.strip()
    if text.startswith("{"):
        items = tuple(parse_operand(t) for t in _split_operands(text[1:-1]))
        return Operand("vec", text, items=items)
    if text.startswith("["):
        inner = text[1:-1].replace(" ", "")
        m = _ADDR.match(inner)
        if m is None:
            m2 = _ABS_ADDR.match(inner)
            if m2:
                return Operand("addr", text, base=None, offset=int(m2.group(1), 0))
            raise Unsupported(f"address operand {text}")
        base = parse_operand(m.group(1))
        return Operand("addr", text, base=base, offset=int(m.group(2), 0) if m.group(2) else 0)
    if "|" in text:
        d, p = text.split("|")
        op = parse_operand(d)
        op.pair = parse_operand(p)
        return op
    if text == "_":
        return Operand("sink", text)
    if text.startswith("!"):
        op = parse_operand(text[1:])
        op.neg = True
        return op
    if text.startswith("%"):
        return Operand("reg", text, value=text)
    if _F32.match(text):
        return Operand("fimm", text, value=int(text[2:], 16), bits=32)
    if _F64.match(text):
        return Operand("fimm", text, value=int(text[2:], 16), bits=64)
    if _INT.match(text):
        t = text.rstrip("U")
        neg = t.startswith("-")
        v = int(t[1:] if neg else t, 0)
        return Operand("imm", text, value=-v if neg else v)
    if _DEC.match(text):
        import struct
        return Operand("fimm", text, value=struct.unpack("<Q", struct.pack("<d", float(text)))[0], bits=64)
    if text.startswith("$") or _SYM.match(text):
        return Operand("sym", text, value=text)
    raise Unsupported(f"operand {text}")


def _expand_regs(decl: str) -> list[str]:
    names = []
    for item in decl.rstrip(";").split(","):
        item = item.strip()
        m = re.match(r"^(%?[\w$]+)<(\d+)>$", item)
        if m:
            names += [f"{m.group(1)}{i}" for i in range(int(m.group(2)))]
        elif item:
            names.append(item)
    return names


def _variable(m: re.Match) -> Variable:
    extern, space, align, typ, name, dims = m.groups()
    elem = max(TYPE_BITS.get(typ, 8) // 8, 1)
    count = 1
    sizes = re.findall(r"\[(\d*)\]", dims or "")
    dynamic = False
    for s in sizes:
        if s == "":
            dynamic = True
        else:
            count *= int(s)
    return Variable(name, space, int(align) if align else elem, 0 if dynamic else elem * count,
                    extern=bool(extern) or dynamic)


def _params(text: str) -> list[Param]:
    params = []
    for item in _split_operands(text):
        item = item.strip()
        if not item:
            continue
        tokens = item.split()
        name = tokens[-1]
        align = 0
        typ = None
        for i, tok in enumerate(tokens):
            if tok == ".align":
                align = int(tokens[i + 1])
            elif tok.startswith(".") and tok[1:] in TYPE_BITS:
                typ = tok[1:]
        m = re.match(r"^([\w$]+)\[(\d+)\]$", name)
        if m:
            name = m.group(1)
            size = int(m.group(2)) * max(TYPE_BITS[typ] // 8, 1)
            typ = "bytes"
        else:
            if typ is None:
                raise Unsupported(f"parameter {item}")
            size = TYPE_BITS[typ] // 8
        params.append(Param(name, typ, size, align or min(size, 8) or 1))
    return params


def parse(text: str) -> dict[str, Kernel]:
    """All kernels of a PTX module, by name."""
    files = {int(n): path for n, path in _FILE.findall(text)}
    # Module-level shared variables (declared outside every .entry).
    body_spans = []
    kernels = {}
    for m in _ENTRY.finditer(text):
        depth, i = 1, len(text)
        for b in _BRACE.finditer(text, m.end()):  # the brace that closes the body
            depth += 1 if b.group() == "{" else -1
            if not depth:
                i = b.end()
                break
        body_spans.append((m.start(), i))
        kernels[m.group(1)] = (m.group(2), text[m.end():i - 1])
    outside = text
    for start, end in reversed(body_spans):
        outside = outside[:start] + outside[end:]
    module_vars = [_variable(v) for v in _VAR.finditer(_COMMENT.sub("", outside))]
    result = {}
    for name, (ptext, body) in kernels.items():
        result[name] = _kernel(name, _params(_COMMENT.sub("", ptext)), body, module_vars, files)
    return result


def _kernel(name, params, body, module_vars, files) -> Kernel:
    registers = {}
    variables = list(module_vars)
    instructions, labels = [], {}
    line = None
    source_file = None
    for raw in body.splitlines():
        stmt = (_COMMENT.sub("", raw) if "/" in raw else raw).strip()
        if not stmt or stmt in ("{", "}"):
            continue
        if stmt.startswith((".loc ", ".loc\t")):
            m = _LOC.match(stmt)
            if m:
                line = int(m.group(2)) or None
                source_file = files.get(int(m.group(1)), source_file)
            continue
        while stmt.startswith("{"):
            stmt = stmt[1:].strip()
        while stmt.endswith("}"):
            stmt = stmt[:-1].strip()
        m = _LABEL.match(stmt) if ":" in stmt else None
        if m and not stmt.startswith("."):
            labels[m.group(1)] = len(instructions)
            stmt = m.group(2).strip()
            if not stmt:
                continue
        for piece in [s.strip().lstrip("{}").strip() for s in stmt.split(";")]:  # nested { } scopes
            if not piece:
                continue
            if piece[0] != ".":
                instructions.append(_instruction(len(instructions), piece, line))
                continue
            if piece.startswith(".reg"):
                rm = _REG.match(piece)
                if rm is None:
                    raise Unsupported(f"declaration {piece}")
                for reg in _expand_regs(rm.group(2)):
                    registers[reg] = rm.group(1)
                continue
            if piece.startswith((".shared", ".local", ".extern")):
                vm = _VAR.match(piece)
                if vm is None:
                    raise Unsupported(f"declaration {piece}")
                variables.append(_variable(vm))
                continue
            if piece.startswith((".pragma", ".maxntid", ".reqntid", ".minnctapersm", ".maxnreg", ".file")):
                continue
            raise Unsupported(f"directive {piece}")
    return Kernel(name, params, registers, variables, instructions, labels, source_file)


def _instruction(index: int, stmt: str, line) -> Instruction:
    guard, neg = None, False
    text = stmt
    if stmt.startswith("@"):
        g, stmt = stmt.split(None, 1)
        neg = g.startswith("@!")
        guard = g[2:] if neg else g[1:]
    pieces = stmt.split(None, 1)
    opcode = pieces[0]
    operands = tuple(parse_operand(t) for t in _split_operands(pieces[1])) if len(pieces) > 1 else ()
    return Instruction(index, opcode, tuple(opcode.split(".")), operands, guard, neg, text, line)
