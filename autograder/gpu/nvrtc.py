"""CUDA C compilation with NVRTC: works without a GPU (laptops, CI), used by every GPU lesson's compile check.

:func:`compile_source` compiles through ``cuda.bindings.nvrtc`` (NVRTC needs no driver) and
returns errors with line and column plus the register / shared-memory use that ptxas reports.
:func:`compile_check` compiles for every architecture in :data:`ARCHS` (Colab's T4 is sm_75) and
names the one an error belongs to, with a hint for the common ones.

The compile check's compilations and the emulator's PTX can be served from a cache (:data:`CACHE_ENV`),
which only the test session turns on: see :func:`cached_compile` for why it is test-only and what makes it exact.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import stat
import tempfile

from ..checks.core import CheckFailed, plural
from ..isolation import sandbox
from ..isolation.guard import audit as guard_audit

#: The architectures the compile check targets: Colab's free T4 (Turing), the A100 (Ampere: cp.async,
#: bf16 mma) and the H100 / H200 (Hopper).  Resources are reported for the first and the last.
ARCHS = ("sm_75", "sm_80", "sm_90")
ARCH = "sm_90"  # the default of compile_source
#: The time limit of every lesson's compile check.  Compiling is the grader's work, not the student's code
#: running: lesson 11's reference kernels take 8 s for the three architectures on an idle laptop core and
#: over 30 s (the default limit of a check) on a grading machine running more workers than it has cores,
#: where a correct kernel then scored 0 for "не завершилась за 30 с".
COMPILE_TIMEOUT_S = 120.0
GPU_NAMES = {"sm_75": "T4 в Colab, Turing", "sm_80": "A100, Ampere", "sm_90": "H100/H200, Hopper"}

# --- NVRTC ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CompileError:
    """One diagnostic of the compiler, lines and columns counted from 1 in the source string."""

    line: int
    column: int | None
    message: str


@dataclasses.dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel."""

    registers: int
    shared_bytes: int  # static shared memory; dynamic shared memory is chosen at launch
    stack_bytes: int
    spill_stores: int
    spill_loads: int


@dataclasses.dataclass(frozen=True)
class CompileResult:
    ok: bool
    log: str
    errors: tuple[CompileError, ...]
    resources: dict  # kernel name (as ptxas names it) -> Resources


_STUB_MARK = "NotImplementedError"


def _load_nvrtc():
    """cuda-python's NVRTC bindings, with the library loaded (None when they are missing).

    Called at import: the check worker imports this module before any student code runs, and
    its guard refuses ctypes (which loads the library) to CPU checks once student code has run.
    """
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc  # cuda-python 11.x / 12.0-12.5
        except ImportError:
            return None
    try:
        nvrtc.nvrtcVersion()
    except Exception:  # the bindings are there but the NVRTC library is not
        return None
    return nvrtc


_NVRTC = _load_nvrtc()


def _program_log(nvrtc, program) -> str:
    _, size = nvrtc.nvrtcGetProgramLogSize(program)
    # A buffer of its own: ``b" " * size`` is, for an empty log (size 1), the one ``b" "`` object this
    # process shares, and NVRTC writing its terminating zero there turns every b" " into b"\x00".
    log = bytearray(size)
    nvrtc.nvrtcGetProgramLog(program, log)
    return bytes(log).replace(b"\x00", b"").decode("utf-8", "replace").strip()


#: The options of every compilation besides ``-arch`` (the last one is dropped for an NVRTC without it).
OPTIONS = ("-std=c++17", "-Xptxas=-v")


def compile_source(source: str, *, arch: str = ARCH, filename: str = "kernel.cu") -> CompileResult:
    """Compile CUDA C with NVRTC for ``arch`` (no GPU needed); diagnostics and resources."""
    return _result(*_compile(source, arch, filename), filename)


@contextlib.contextmanager
def _program(source: str, filename: str):
    """An NVRTC program of ``source`` (and the bindings), destroyed on leaving."""
    nvrtc = _NVRTC
    if nvrtc is None:
        raise RuntimeError("cuda-python (cuda.bindings.nvrtc) or the NVRTC library is not installed")
    err, program = nvrtc.nvrtcCreateProgram(source.encode("utf-8"), filename.encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"nvrtcCreateProgram failed: {err}")
    try:
        yield nvrtc, program
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _compile(source: str, arch: str, filename: str) -> tuple[bool, str]:
    """One NVRTC compilation: (succeeded, the log).  Everything a :class:`CompileResult` holds comes from these two."""
    with _program(source, filename) as (nvrtc, program):
        options = [f"-arch={arch}".encode(), *(option.encode() for option in OPTIONS)]
        (result,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if result == nvrtc.nvrtcResult.NVRTC_ERROR_INVALID_OPTION:  # an old NVRTC without -Xptxas
            options = options[:2]
            (result,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        log = _program_log(nvrtc, program)
    return result == nvrtc.nvrtcResult.NVRTC_SUCCESS, log


def ptx(source: str, *, arch: str = "compute_75", filename: str = "kernel.cu", options: tuple = ()) -> str:
    """The PTX NVRTC makes of ``source`` for a virtual architecture (``compute_75``, ``compute_80``), with
    line info (``.loc`` lines name ``filename``'s lines): what the driver would JIT, and what the emulator
    runs.  ``options``: more NVRTC options, as ``cupy.RawKernel(options=...)`` takes them (``-DBC=64``).
    A source that does not compile raises :class:`CheckFailed` with the compiler's errors.  In the test session
    served from its cache (:func:`cached_compile` says why that is test-only and exact)."""
    if _CACHE is None:
        ok, text = _ptx(source, arch, filename, options)
    else:
        entry = _cached(ptx_cache_key(source, arch, filename, options), lambda: dict(zip(("ok", "text"), _ptx(
            source, arch, filename, options))), lambda e: type(e.get("ok")) is bool and type(e.get("text")) is str)
        ok, text = entry["ok"], entry["text"]
    if not ok:
        raise CheckFailed(format_errors(_result(False, text, filename), source))
    return text


def _ptx(source: str, arch: str, filename: str, options: tuple) -> tuple[bool, str]:
    """One NVRTC compilation to PTX: (True, the PTX) or (False, the log)."""
    with _program(source, filename) as (nvrtc, program):
        options = [f"-arch={arch}".encode(), b"-std=c++17", b"-lineinfo", *(str(o).encode() for o in options)]
        (result,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return False, _program_log(nvrtc, program)
        _, size = nvrtc.nvrtcGetPTXSize(program)
        text = bytearray(size)  # a buffer of its own, as in _program_log
        nvrtc.nvrtcGetPTX(program, text)
    return True, bytes(text).rstrip(b"\x00").decode("utf-8")


def _result(ok: bool, log: str, filename: str) -> CompileResult:
    return CompileResult(ok, log, tuple(parse_errors(log, filename)) if not ok else (), parse_resources(log))


# --- the test session's compile cache --------------------------------------------------------

#: The folder of the compile cache; set by the test session only (tests/conftest.py).
CACHE_ENV = sandbox.NVRTC_CACHE_ENV


def _cache_folder() -> str | None:
    """The cache folder named by :data:`CACHE_ENV`, if it is a folder of this user's that no one else may
    write; else None (no cache)."""
    folder = os.environ.get(CACHE_ENV)
    if not folder or _NVRTC is None:
        return None
    try:
        info = os.stat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return os.path.abspath(folder)


def _compiler_identity() -> list:
    """What besides the input decides NVRTC's output: the library's version and the packages that bring it."""
    from importlib import metadata

    _, major, minor = _NVRTC.nvrtcVersion()
    packages = []
    for name in ("nvidia-cuda-nvrtc", "cuda-bindings"):
        try:
            packages.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            packages.append(f"{name} missing")
    return [f"nvrtc {major}.{minor}", *packages, getattr(_NVRTC, "__file__", "")]


#: Read once, at import: the check worker imports this module before any student code runs, so nothing a
#: submission does to the environment (or to this module, which the guard restores) turns the cache on.
_CACHE = _cache_folder()
_IDENTITY = _compiler_identity() if _CACHE else None


def cache_key(source: str, arch: str, filename: str = "kernel.cu") -> str:
    """The cache's name for one compilation: a SHA-256 of the compiler, the options and the whole source."""
    return _key([_IDENTITY, arch, list(OPTIONS), filename, source])


def ptx_cache_key(source: str, arch: str, filename: str = "kernel.cu", options: tuple = ()) -> str:
    """The cache's name for one :func:`ptx`: the same, with the PTX options and the student's own."""
    return _key([_IDENTITY, "ptx", arch, ["-std=c++17", "-lineinfo"], [str(o) for o in options], filename, source])


def _key(parts: list) -> str:
    return hashlib.sha256(json.dumps(parts, ensure_ascii=True).encode("ascii")).hexdigest()


def _cached(key: str, make, valid) -> dict:
    """The entry ``key`` of the cache (its JSON object, when ``valid(entry)``), else ``make()``'s, stored.

    A miss takes a lock of its own key first (``<key>.lock`` beside it): the test session's workers start
    the same lessons at once, and one compiles while the others wait and read its entry.  Where the folder
    cannot be written (the OS sandbox shows it read-only), or where the process's guard would refuse it,
    nothing is stored: it waits for a compilation of the same key in
    progress (a shared lock of an existing lock file), then reads the entry or compiles."""
    path = os.path.join(_CACHE, key + ".json")

    def stored():
        try:
            with open(path, encoding="utf-8") as handle:
                entry = json.load(handle)
            return entry if isinstance(entry, dict) and valid(entry) else None
        except (OSError, ValueError):
            return None

    entry = stored()
    if entry is not None:
        return entry
    writable = not guard_audit.refuses_writing(path)  # a worker's guard protecting the folder (a PTX made in a check)
    try:
        lock = open(path[:-len(".json")] + ".lock", "a" if writable else "r")
    except OSError:
        try:  # a read-only folder: wait for a compilation in progress all the same, if there is one
            lock, writable = open(path[:-len(".json")] + ".lock"), False
        except OSError:
            return make()
    with lock:
        fcntl.flock(lock, fcntl.LOCK_SH if not writable else fcntl.LOCK_EX)  # released when closed
        entry = stored()
        if entry is not None or not writable:
            return entry if entry is not None else make()
        entry = make()
        try:
            fd, scratch = tempfile.mkstemp(dir=_CACHE, prefix=".entry-")
        except OSError:
            return entry
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(entry, handle)
            os.replace(scratch, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.remove(scratch)
        return entry


def cached_compile(source: str, arch: str = ARCH, filename: str = "kernel.cu") -> CompileResult:
    """:func:`compile_source`, served from the test session's cache when it has compiled this before.

    Test-only by construction: the cache is on only where :data:`CACHE_ENV` names an existing folder of
    this user's that neither group nor others may write, read once when this module is imported (before
    any student code).  tests/conftest.py sets it for the test session (the banks compile the same
    reference kernels for three architectures again and again); nothing of the grader does —
    ``nbgrader autograde``, ``course autograde`` and a student's ``grade()`` compile every time.

    Exact: an entry holds the two things a compilation returns (success, the log), and the result is
    rebuilt from them by the same code as :func:`compile_source`'s: it is what that compilation gave, and
    what a fresh one gives but for ptxas's "Compile time = ... ms" line of the log, which nothing reads.  Its
    name is a SHA-256 over the NVRTC library and package versions, the architecture, the options, the
    file name and the whole source: a result is served only for exactly this source, never another
    submission's.  Entries are written whole (a new file renamed into place), a folder that cannot be
    read or written (in the OS sandbox of the test session's nbgrader runs it is read-only, elsewhere
    hidden) just means compiling, and the one way to a wrong result — writing a forged entry into the
    folder — needs a folder that graded code can write, which grading never gives: it never has the cache on.
    """
    if _CACHE is None:
        return compile_source(source, arch=arch, filename=filename)

    def make():
        ok, log = _compile(source, arch, filename)
        return {"ok": ok, "log": log}

    entry = _cached(cache_key(source, arch, filename), make,
                    lambda e: type(e.get("ok")) is bool and type(e.get("log")) is str)
    return _result(entry["ok"], entry["log"], filename)


_DIAGNOSTIC = re.compile(r"^(?P<file>[^\s(]+)\((?P<line>\d+)\): (?P<kind>error|catastrophic error|warning)"
                         r": (?P<message>.*)$")


#: Whether :func:`warm_up` ran in this process (tests/test_lesson11_flash_decoding.py reads it from a NumPy check).
WARMED_UP = [False]


def warm_up() -> None:
    """One tiny compilation before student code: the threads NVRTC keeps start here.  The worker calls it before a
    check without an address-space cap runs (:func:`autograder.isolation.worker._prepare`), not at import: NVRTC's
    first compilation maps its memory, 13 GB of address space on a 16-core H200 host (0.2 GB on a 2-core laptop),
    more than the 4 GiB cap of a NumPy check that shares the module (lesson 11's)."""
    WARMED_UP[0] = True
    if _NVRTC is not None:
        try:
            compile_source('extern "C" __global__ void autograder_nvrtc_warm_up() {}')
        except Exception:
            pass


def parse_errors(log: str, filename: str = "kernel.cu") -> list[CompileError]:
    """Errors of an NVRTC log; the column comes from the caret line under the quoted code."""
    lines = log.splitlines()
    errors = []
    for index, line in enumerate(lines):
        match = _DIAGNOSTIC.match(line.strip())
        if not match or "error" not in match["kind"]:
            continue
        column = None
        for follow in lines[index + 1:index + 4]:  # "  <code>" then "  ^"
            if follow.strip() == "^":
                column = max(len(follow) - len(follow.lstrip()) - 1, 1)  # the log indents by 2
                break
        errors.append(CompileError(int(match["line"]), column, match["message"].strip()))
    if not errors and log.strip():  # ptxas errors carry no line: "ptxas error : Entry function ..."
        found = [l.split(":", 1)[-1].strip() for l in lines if "error" in l.lower()] or [lines[0]]
        errors += [CompileError(0, None, message) for message in found]
    return errors


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_resources(log: str) -> dict[str, Resources]:
    """ptxas -v lines -> {kernel: Resources}."""
    found: dict[str, Resources] = {}
    current, stack = None, (0, 0, 0)
    for line in log.splitlines():
        if (m := _ENTRY.search(line)):
            current, stack = m.group(1), (0, 0, 0)
        elif (m := _PROPS.search(line)) and current:
            stack = tuple(int(g) for g in m.groups())
        elif (m := _USED.search(line)) and current:
            found[current] = Resources(int(m.group(1)), int(m.group(2) or 0), *stack)
            current = None
    return found


# Known compiler messages -> a hint in Russian (first match wins).
_HINTS = [
    (r'expected a ";"', "не хватает точки с запятой `;` в конце предыдущей инструкции"),
    (r'expected a "\)"|expected a "\]"|expected a "}"',
     "не закрыта скобка: проверьте пары ( ), [ ], { } в этой и предыдущих строках"),
    (r'identifier "(threadidx|blockidx|blockdim|griddim)\w*" is undefined',
     "встроенные переменные пишутся так: threadIdx, blockIdx, blockDim, gridDim (с заглавной буквы)"),
    (r'identifier "[^"]+" is undefined',
     "имя не объявлено: опечатка, или переменная объявлена внутри другого блока { }"),
    (r"invalid preprocessing directive|unrecognized preprocessing directive",
     "строка начинается с `#`: в CUDA C это директива препроцессора; комментарии пишутся через `//`"),
    (r"no instance of overloaded function|too few arguments|too many arguments",
     "функция вызвана с неверными аргументами: например, __shfl_xor_sync(mask, value, laneMask)"),
    (r"cannot be used to initialize|a value of type .* cannot be assigned",
     "несовпадение типов: float4 и float — разные типы, указатели приводятся reinterpret_cast<...>"),
    (r"expression must be a modifiable lvalue",
     "запись в константу: вход объявлен как const float* — писать можно только в выход"),
    (r"requires \.target sm_(\d+)|not supported on \.target|requires sm_\d+",
     "эта инструкция есть не на всех GPU: cp.async и bf16 mma.sync появились в sm_80 (A100), а у T4 в Colab — "
     "sm_75. Оберните быстрый путь в `#if __CUDA_ARCH__ >= 800 … #else <обычная загрузка / f16> #endif`: "
     "NVRTC компилирует ядро отдельно для каждой архитектуры, и каждая получит свою ветку"),
    (r"too much shared data",
     "статической разделяемой памяти больше 48 КиБ: используйте extern __shared__ и shared_mem при запуске"),
]


def hint_for(message: str) -> str | None:
    for pattern, hint in _HINTS:
        if re.search(pattern, message, re.IGNORECASE):
            return hint
    return None


def format_errors(result: CompileResult, source: str, limit: int = 3) -> str:
    """The first errors with their source line, a caret under the column, and a hint."""
    code_lines = source.splitlines()
    parts = []
    for error in result.errors[:limit]:
        where = (f"строка {error.line}" + (f", столбец {error.column}" if error.column else "")
                 if error.line else "без номера строки")
        text = f"• {where}: {error.message}"
        if 0 < error.line <= len(code_lines):
            code = code_lines[error.line - 1].expandtabs(4)
            text += f"\n    {code}"
            if error.column:
                text += "\n    " + " " * (error.column - 1) + "^"
        hint = hint_for(error.message)
        if hint:
            text += f"\n  Подсказка: {hint}."
        parts.append(text)
    more = len(result.errors) - limit
    if more > 0:
        parts.append(f"… и ещё ошибок: {more} (часто это следствия первой).")
    return "\n".join(parts)


def format_resources(resources: dict[str, Resources]) -> str:
    lines = []
    for name, r in sorted(resources.items()):
        registers = plural(r.registers, "регистр", "регистра", "регистров")
        line = (f"{name}: {r.registers} {registers} на поток, {r.shared_bytes} Б статической "
                f"разделяемой памяти, стек {r.stack_bytes} Б")
        if r.spill_stores or r.spill_loads:
            line += (f"; ВНИМАНИЕ: вытеснение регистров в локальную память (spill: {r.spill_stores} Б "
                     f"записей, {r.spill_loads} Б чтений) — массив с индексом, неизвестным при компиляции, "
                     "или слишком много живых значений")
        lines.append(line)
    return "\n".join(lines)


_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.DOTALL)
_BRANCH_HEAD = re.compile(r"(\bif\s*\(.*\)|\belse)\s*$", re.DOTALL)


def barriers_in_branches(source: str) -> list[int]:
    """Lines of ``__syncthreads()`` calls inside an ``if`` / ``else`` (a block or a single statement).

    NVRTC compiles them silently, but a barrier that only some threads of a block reach hangs the
    block or lets the others run on: the result is wrong or the kernel never ends.  A heuristic
    over the text (comments, strings and preprocessor lines ignored), for a warning, not a verdict.
    """
    def blank(match):
        return re.sub(r"[^\n]", " ", match.group(0))

    text = _COMMENT_OR_STRING.sub(blank, source)
    text = re.sub(r"^[ \t]*#[^\n]*", blank, text, flags=re.MULTILINE)
    found, stack, start = [], [], 0  # stack: is each open block the body of an if / else?
    for match in re.finditer(r"[{};]|__syncthreads\s*\(\s*\)", text):
        head = text[start:match.start()]
        if match.group(0) == "{":
            stack.append(bool(_BRANCH_HEAD.search(head)))
            start = match.end()
        elif match.group(0) == "}":
            if stack:
                stack.pop()
            start = match.end()
        elif match.group(0) == ";":
            start = match.end()
        elif any(stack) or re.search(r"(\bif\s*\(.*\)|\belse)\s*$", head, re.DOTALL):
            found.append(text.count("\n", 0, match.start()) + 1)
    return found


def compile_check(source, kernels: tuple[str, ...], *, what: str, archs: tuple[str, ...] = ARCHS) -> str:
    """The body of a lesson's "compiles" check: every arch in ``archs``; CheckFailed or the resources."""
    if not isinstance(source, str):
        raise CheckFailed(f"{what} должен быть строкой с кодом CUDA C, а получено {type(source).__name__}.")
    if _STUB_MARK in source:
        raise CheckFailed(f"Ядро ещё не написано: в {what} остались строки заглушки "
                          "«# ВАШ КОД ЗДЕСЬ» / «raise NotImplementedError()». Замените их кодом CUDA C.")
    if _NVRTC is None:
        raise CheckFailed("Не найден NVRTC из пакета cuda-python: установите `pip install cuda-bindings "
                          "nvidia-cuda-nvrtc` (первая ячейка ноутбука делает это в Colab).")
    results = {arch: cached_compile(source, arch) for arch in archs}
    failed = [arch for arch, r in results.items() if not r.ok]
    if failed:
        fine = [arch for arch in archs if arch not in failed]
        where = ", ".join(f"{a} ({GPU_NAMES.get(a, a)})" for a in failed)
        text = f"{what} не компилируется (NVRTC) для {where}"
        if fine:
            text += (f", хотя для {', '.join(fine)} компилируется: ядро использует то, чего на "
                     f"{failed[0]} нет. Ошибки для {failed[0]}")
        raise CheckFailed(f"{text}:\n{format_errors(results[failed[0]], source)}")
    missing = [k for k in kernels if not re.search(r'extern\s+"C"[^;{]*\b' + re.escape(k) + r"\s*\(", source)]
    if missing:
        names = ", ".join(missing)
        raise CheckFailed(f"В {what} нет ядра `extern \"C\" __global__ void {missing[0]}(...)` "
                          f"(не найдено: {names}). Без extern \"C\" имя искажается компилятором C++ "
                          "(name mangling), и cupy.RawKernel не найдёт ядро по имени.")
    reports = [f"ВНИМАНИЕ, строка {line}: __syncthreads() внутри if/else. Если условие разное у потоков "
               "блока, до барьера доходят не все — блок зависает или читает недописанные данные. Вынесите "
               "барьер из if (пусть все потоки блока проходят его одинаково)." for line in barriers_in_branches(source)]
    for arch in dict.fromkeys((archs[0], archs[-1])):
        own = {k: v for k, v in results[arch].resources.items() if k in kernels}
        reports.append(f"{arch}: " + (format_resources(own) if own else "расход регистров компилятор не сообщил"))
    return f"компилируется для {', '.join(archs)}.\n" + "\n".join(reports)

