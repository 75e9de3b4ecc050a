"""GPU lessons (06-08): NVRTC compilation without a GPU, GPU checks, device memory and timing.

* :func:`compile_source` compiles CUDA C with NVRTC through ``cuda.bindings.nvrtc`` (NVRTC needs
  no driver, so it works on a laptop and in CI) and returns errors with line and column plus the
  register / shared-memory use that ptxas reports.  :func:`compile_check` compiles for every
  architecture in :data:`ARCHS` (Colab's T4 is sm_75) and names the one an error belongs to.
* :func:`gpu_check` registers a check that needs a GPU: on a machine without one it fails with
  0 points and the message "нужен GPU", never passes.  Each check already runs in its own worker
  process (:mod:`autograder.isolation`), so a kernel that faults or hangs costs only that check.
* :class:`DeviceAllocations` observes every device allocation through CuPy's allocator hook,
  fills it with NaN before student code sees it and surrounds it with guard bytes that are
  checked after the call (:func:`run_student` does this for every call of student code);
  :func:`time_student` / :func:`time_ms` time with CUDA events; :func:`sanitize` runs a student
  function under ``compute-sanitizer`` (racecheck, memcheck) in a child process.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from . import guard
from .core import CheckFailed, call_student, check, shorten

try:  # imported before any student code runs (the worker imports the check module first)
    import cupy as _cp
except Exception:  # no CuPy (laptops, CI): compile checks still run, GPU checks say "нужен GPU"
    _cp = None

#: The students' repository of the course (what `course publish` writes is pushed there): the
#: notebooks' install cell and "Open in Colab" links point to it.  The one place of this address:
#: `course publish OUT --repository URL` writes another one into the published copy (notebooks,
#: this constant, README), so the course's own notebooks keep this one.
COURSE_REPOSITORY = "https://github.com/COURSE-ORG/llm-inference-module07"

#: The architectures the compile check targets: Colab's free T4 (Turing), the A100 (Ampere: cp.async,
#: bf16 mma) and the H100 / H200 (Hopper).  Resources are reported for the first and the last.
ARCHS = ("sm_75", "sm_80", "sm_90")
ARCH = "sm_90"  # the default of compile_source
GPU_NAMES = {"sm_75": "T4 в Colab, Turing", "sm_80": "A100, Ampere", "sm_90": "H100/H200, Hopper"}

#: Set to e.g. "75" to build every CuPy kernel as compute_75 PTX, JIT-compiled by the driver of a newer
#: GPU: on an H200 this proves that the kernels and checks work on sm_75 (``__CUDA_ARCH__`` is 750).
FORCE_PTX_ENV = "AUTOGRADER_FORCE_PTX_ARCH"


def colab_url(lesson: str, branch: str = "main", repository: str | None = None) -> str:
    """The "Open in Colab" address of a student notebook in the course repository."""
    path = (repository or COURSE_REPOSITORY).removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{path}/blob/{branch}/notebooks/{lesson}/{lesson}.ipynb"


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
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(program, log)
    return log.replace(b"\x00", b"").decode("utf-8", "replace").strip()


def compile_source(source: str, *, arch: str = ARCH, filename: str = "kernel.cu") -> CompileResult:
    """Compile CUDA C with NVRTC for ``arch`` (no GPU needed); diagnostics and resources."""
    nvrtc = _NVRTC
    if nvrtc is None:
        raise RuntimeError("cuda-python (cuda.bindings.nvrtc) or the NVRTC library is not installed")
    err, program = nvrtc.nvrtcCreateProgram(source.encode("utf-8"), filename.encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"nvrtcCreateProgram failed: {err}")
    try:
        options = [f"-arch={arch}".encode(), b"-std=c++17", b"-Xptxas=-v"]
        (result,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if result == nvrtc.nvrtcResult.NVRTC_ERROR_INVALID_OPTION:  # an old NVRTC without -Xptxas
            options = options[:2]
            (result,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        log = _program_log(nvrtc, program)
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    ok = result == nvrtc.nvrtcResult.NVRTC_SUCCESS
    return CompileResult(ok, log, tuple(parse_errors(log, filename)) if not ok else (),
                         parse_resources(log))


_DIAGNOSTIC = re.compile(r"^(?P<file>[^\s(]+)\((?P<line>\d+)\): (?P<kind>error|catastrophic error|warning)"
                         r": (?P<message>.*)$")


def _warm_up_nvrtc() -> None:
    """One tiny compilation at import, before student code: threads NVRTC keeps start here."""
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
        line = (f"{name}: {r.registers} регистров на поток, {r.shared_bytes} Б статической "
                f"разделяемой памяти, стек {r.stack_bytes} Б")
        if r.spill_stores or r.spill_loads:
            line += (f"; ВНИМАНИЕ: вытеснение регистров в локальную память (spill: {r.spill_stores} Б "
                     f"записей, {r.spill_loads} Б чтений) — массив с индексом, неизвестным при компиляции, "
                     "или слишком много живых значений")
        lines.append(line)
    return "\n".join(lines)


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
    results = {arch: compile_source(source, arch=arch) for arch in archs}
    failed = [arch for arch, r in results.items() if not r.ok]
    if failed:
        fine = [arch for arch in archs if arch not in failed]
        where = ", ".join(f"{a} ({GPU_NAMES.get(a, a)})" for a in failed)
        text = f"{what} не компилируется (NVRTC) для {where}"
        if fine:
            text += (f", хотя для {', '.join(fine)} компилируется: ядро использует то, чего на "
                     f"{failed[0]} нет. Ошибки для {failed[0]}")
        raise CheckFailed(f"{text}:\n{format_errors(results[failed[0]], source)}")
    result = results[archs[-1]]
    missing = [k for k in kernels if not re.search(r'extern\s+"C"[^;{]*\b' + re.escape(k) + r"\s*\(", source)]
    if missing:
        names = ", ".join(missing)
        raise CheckFailed(f"В {what} нет ядра `extern \"C\" __global__ void {missing[0]}(...)` "
                          f"(не найдено: {names}). Без extern \"C\" имя искажается компилятором C++ "
                          "(name mangling), и cupy.RawKernel не найдёт ядро по имени.")
    reports = []
    for arch in dict.fromkeys((archs[0], archs[-1])):
        own = {k: v for k, v in results[arch].resources.items() if k in kernels}
        reports.append(f"{arch}: " + (format_resources(own) if own else "расход регистров компилятор не сообщил"))
    return f"компилируется для {', '.join(archs)}.\n" + "\n".join(reports)


_warm_up_nvrtc()


# --- is there a GPU? -----------------------------------------------------------------------

def _force_ptx_arch() -> None:
    """Honour :data:`FORCE_PTX_ENV`: CuPy builds PTX for that architecture and the driver JIT-compiles it.

    CuPy picks ``-arch`` from the device (``cupy.cuda.compiler._get_arch``) and emits PTX instead of a
    cubin when ``_use_ptx`` is set; both are module globals read at each compilation.
    """
    arch = os.environ.get(FORCE_PTX_ENV, "").strip()
    if not arch or _cp is None:
        return
    from cupy.cuda import compiler

    if not hasattr(compiler, "_get_arch"):
        raise RuntimeError(f"{FORCE_PTX_ENV}: this CuPy has no compiler._get_arch to override")
    compiler._get_arch = lambda: arch
    compiler._use_ptx = True


_force_ptx_arch()


def gpu_status() -> tuple[bool, str]:
    """(True, description) on a machine with a usable CUDA GPU and CuPy, else (False, why not)."""
    if _cp is None:
        return False, "CuPy не установлен"
    try:
        count = _cp.cuda.runtime.getDeviceCount()
    except Exception as error:  # no driver: cudaErrorInsufficientDriver / NoDevice
        return False, f"нет драйвера CUDA или GPU ({type(error).__name__})"
    if count < 1:
        return False, "GPU не найден"
    props = _cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return True, f"{name}, compute capability {props['major']}.{props['minor']}, CuPy {_cp.__version__}"


def describe_gpu() -> str:
    """One line for the notebooks: which GPU the checks will use, or why there is none."""
    ok, text = gpu_status()
    if ok:
        return f"GPU: {text}"
    return (f"GPU недоступен: {text}. Ядро всё равно компилируется (NVRTC) и проверяется на ошибки; "
            "проверки запуска покажут «нужен GPU» (0 баллов). Откройте ноутбук в Colab с GPU.")


def require_gpu() -> None:
    """Fail the running check with 0 points, clearly, when there is no GPU; warm CuPy up otherwise."""
    ok, why = gpu_status()
    if not ok:
        raise CheckFailed(
            f"нужен GPU: {why}. Эта проверка запускает ядро, и без GPU она не засчитывается "
            "(0 баллов), а не пропускается. Откройте ноутбук в Colab (Среда выполнения → Сменить среду "
            "выполнения → GPU) или на машине с NVIDIA GPU. Компиляция ядра проверяется и без GPU.")
    _warm_up()


_WARM_UP_SOURCE = 'extern "C" __global__ void autograder_warm_up(float* y) { y[threadIdx.x] = 1.0f; }'


def _warm_up() -> None:
    """Compile and launch a tiny kernel before student code: CuPy's lazy imports happen here."""
    y = _cp.zeros(32, dtype=_cp.float32)
    _cp.RawKernel(_WARM_UP_SOURCE, "autograder_warm_up")((1,), (32,), (y,))
    float(y.sum())
    _cp.cuda.Device().synchronize()


def gpu_check(check_id: str, *, points: float, title: str, timeout_s: float = 60.0):
    """Register a check that runs kernels: no address-space cap, and "нужен GPU" without one."""

    def register(function):
        @functools.wraps(function)
        def run(*args, **kwargs):
            require_gpu()
            return function(*args, **kwargs)

        return check(check_id, points=points, title=title, timeout_s=timeout_s,
                     memory_limit_gib=None, needs_gpu=True)(run)

    return register


# --- running student kernels ---------------------------------------------------------------

_CUDA_ERRORS = {
    "ILLEGAL_ADDRESS": "ядро обратилось к памяти за пределами массивов (illegal address): проверьте "
                       "индексы и защиту хвоста (if (i < D) ...)",
    "IllegalAddress": "ядро обратилось к памяти за пределами массивов (illegal address): проверьте "
                      "индексы и защиту хвоста (if (i < D) ...)",
    "InvalidAddressSpace": "ядро обратилось по недопустимому адресу (illegal address space): проверьте индексы "
                           "и защиту хвоста (if (i < D) ...)",
    "MISALIGNED_ADDRESS": "невыровненный доступ (misaligned address): float4 можно читать только по адресу, "
                          "кратному 16 байтам — проверьте D % 4 == 0 и выравнивание указателя",
    "MisalignedAddress": "невыровненный доступ (misaligned address): float4 можно читать только по адресу, "
                         "кратному 16 байтам — проверьте D % 4 == 0 и выравнивание указателя",
    "INVALID_VALUE": "неверные параметры запуска: размер блока не больше 1024 потоков, grid не пустой, "
                     "shared_mem не больше допустимого",
    "InvalidValue": "неверные параметры запуска: размер блока не больше 1024 потоков, grid не пустой, "
                    "shared_mem не больше допустимого",
    "LAUNCH_OUT_OF_RESOURCES": "не хватает регистров или разделяемой памяти для такого блока: уменьшите "
                               "число потоков в блоке или используйте __launch_bounds__",
    "CompileException": "ядро не компилируется: посмотрите на проверку компиляции выше",
}


def _explain_cuda(text: str) -> str:
    for key, hint in _CUDA_ERRORS.items():
        if key in text:
            return f"\nВероятная причина: {hint}."
    return ""


def run_student(function, *args, case: str, what: str, **kwargs):
    """Call the student's wrapper and wait for its kernels; CUDA errors get a Russian reason.

    Every device allocation made during the call is NaN-filled and guarded; after the call the guard
    bytes of those allocations and of the grader's inputs (:func:`device`) must be intact.
    """
    with DeviceAllocations() as seen:
        try:
            result = call_student(function, *args, case=case, what=what, **kwargs)
        except CheckFailed as failure:
            raise CheckFailed(f"{failure}{_explain_cuda(str(failure))}") from None
    try:
        _cp.cuda.Device().synchronize()
    except Exception as error:  # the kernel faulted after the call returned
        text = f"{type(error).__name__}: {error}"
        raise CheckFailed(shorten(f"ядро {what} завершилось с ошибкой CUDA на случае {case}:\n{text}"
                                  f"{_explain_cuda(text)}\nПосле такой ошибки контекст CUDA процесса "
                                  "испорчен; остальные проверки идут в своих процессах.")) from None
    damaged = (seen._outer or seen).damaged_guards()
    if seen._outer is None:
        seen.release()
    if damaged:
        raise CheckFailed(guard_message(damaged, whose="выделенного массива (выхода)", case=case, what=what))
    damaged = _INPUTS.damaged_guards()
    if damaged:
        raise CheckFailed(guard_message(damaged, whose="входного массива", case=case, what=what))
    return result


def to_host(got, *, shape: tuple[int, ...], case: str, name: str = "результат") -> np.ndarray:
    """A cupy.ndarray float32 of ``shape`` copied to the host; anything else is a failure."""
    if type(got) is not _cp.ndarray:
        hint = (" Верните массив CuPy (на GPU), не копируйте его на CPU (.get(), cp.asnumpy)."
                if isinstance(got, np.ndarray) else "")
        raise CheckFailed(f"{name} должен быть cupy.ndarray, а получено {type(got).__name__} "
                          f"(случай: {case}).{hint}")
    if tuple(got.shape) != tuple(shape):
        raise CheckFailed(f"{name}: форма {tuple(got.shape)}, ожидалась {tuple(shape)} (случай: {case}).")
    if got.dtype != np.float32:
        raise CheckFailed(f"{name}: dtype {got.dtype}, ожидался float32 (случай: {case}).")
    host = _cp.asnumpy(got)
    bad = ~np.isfinite(host)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise CheckFailed(
            f"{name} содержит {int(bad.sum())} значений NaN/inf из {host.size} (случай: {case}); первый — "
            f"по индексу {first}. Либо ядро их вычислило (переполнение exp, деление на 0), либо не записало "
            "эти элементы: проверка заполняет каждый новый массив на GPU значениями NaN до запуска ядра. "
            "Подсказка (второй случай): число блоков округлено вниз (n // block вместо "
            "(n + block − 1) // block) — последний неполный блок не запущен, — или цикл потока кончается раньше.")
    return host


_EXACT_ALLOCATIONS = False  # under compute-sanitizer memcheck: plain cudaMalloc of the exact size


def device(array: np.ndarray):
    """A host array on the GPU: a fresh allocation with guard bytes, checked after each student call."""
    if _EXACT_ALLOCATIONS:
        return _cp.asarray(array)
    array = np.ascontiguousarray(array)
    base = _cp.get_default_memory_pool().malloc(array.nbytes + 2 * GUARD_BYTES)
    _cp.cuda.runtime.memset(base.ptr, POISON, array.nbytes + 2 * GUARD_BYTES)
    _INPUTS.blocks.append((base, array.nbytes))
    out = _cp.ndarray(array.shape, dtype=array.dtype,
                      memptr=_cp.cuda.MemoryPointer(base.mem, base.ptr - base.mem.ptr + GUARD_BYTES))
    out.set(array)
    return out


# --- observing device allocations ----------------------------------------------------------

GUARD_BYTES = 256  # before and after every allocation; 256 keeps CuPy's alignment
POISON = 0xFF      # every byte 0xFF: each float32 / float64 is a NaN, each int32 is -1


class DeviceAllocations:
    """Every allocation made through CuPy while the block runs: count, total and largest bytes.

    CuPy allocates all arrays through one allocator function; the hook wraps the default memory
    pool's ``malloc``.  Arrays that existed before (the inputs) are not counted.  Each allocation
    is filled with NaN (the pool hands back memory the grader just freed, so an element the
    kernel never writes could otherwise hold the right value by chance) and gets
    :data:`GUARD_BYTES` of the same pattern before and after it; :meth:`damaged_guards` reports
    writes into them.  Nested blocks share the outermost hook.
    """

    _active = None

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.blocks: list = []  # (pooled pointer of size + 2 guards, requested size)
        self._pool = _cp.get_default_memory_pool()
        self._outer = None

    def _malloc(self, size: int):
        self.sizes.append(int(size))
        base = self._pool.malloc(size + 2 * GUARD_BYTES)
        _cp.cuda.runtime.memsetAsync(base.ptr, POISON, size + 2 * GUARD_BYTES,
                                     _cp.cuda.get_current_stream().ptr)
        self.blocks.append((base, int(size)))
        return _cp.cuda.MemoryPointer(base.mem, base.ptr - base.mem.ptr + GUARD_BYTES)

    def __enter__(self):
        if DeviceAllocations._active is not None:  # nested: the outer hook records and guards
            self._outer = DeviceAllocations._active
            self._first = len(self._outer.sizes)
            return self
        DeviceAllocations._active = self
        _cp.cuda.set_allocator(self._malloc)
        return self

    def __exit__(self, *exc):
        if self._outer is not None:
            self.sizes = self._outer.sizes[self._first:]
            return False
        DeviceAllocations._active = None
        current = _cp.cuda.get_allocator()
        _cp.cuda.set_allocator(self._pool.malloc)
        if exc[0] is None and getattr(current, "__self__", None) is not self:
            raise CheckFailed("функция заменила распределитель памяти CuPy (cupy.cuda.set_allocator): "
                              "при проверке это запрещено.")
        return False

    def damaged_guards(self) -> list:
        """(requested size, "до"/"после", bytes changed) of every block whose guard bytes changed."""
        found = []
        for base, size in self.blocks:
            offset = base.ptr - base.mem.ptr
            for where, start in (("до", 0), ("после", GUARD_BYTES + size)):
                view = _cp.ndarray((GUARD_BYTES,), dtype=_cp.uint8,
                                   memptr=_cp.cuda.MemoryPointer(base.mem, offset + start))
                changed = int(GUARD_BYTES - np.count_nonzero(view.get() == POISON))
                if changed:
                    found.append((size, where, changed))
        return found

    def release(self) -> None:
        self.blocks.clear()

    @property
    def total(self) -> int:
        return sum(self.sizes)

    @property
    def largest(self) -> int:
        return max(self.sizes, default=0)


class _GuardedInputs:
    """Inputs the grader put on the GPU (:func:`device`) with guard bytes; checked after every student call."""

    blocks: list = []
    damaged_guards = DeviceAllocations.damaged_guards


_INPUTS = _GuardedInputs()


def guard_message(damaged, *, whose: str, case: str, what: str) -> str:
    size, where, changed = damaged[0]
    return (f"ядро {what} записало за пределы {whose} (случай: {case}): изменено {changed} Б из "
            f"{GUARD_BYTES} контрольных байт {where} массива размером {size} Б. Даже если значения "
            "совпали, такая запись портит чужую память. Подсказка: нет защиты хвоста "
            "(`if (i < n)`) при числе блоков, округлённом вверх, или неверно вычислен индекс строки/столбца.")


# --- timing ----------------------------------------------------------------------------------

def _timed_loop(function, args, repeat: int) -> float:
    """Milliseconds per call of ``repeat`` back-to-back calls, bracketed by CUDA events."""
    start, end = _cp.cuda.Event(), _cp.cuda.Event()
    start.record()
    for _ in range(repeat):
        function(*args)
    end.record()
    end.synchronize()
    return _cp.cuda.get_elapsed_time(start, end) / repeat


def time_ms(function, *args, repeat: int = 10, rounds: int = 5, warmup: int = 2) -> float:
    """Median over ``rounds`` of the mean time per call (grader-side functions)."""
    for _ in range(warmup):
        function(*args)
    _cp.cuda.Device().synchronize()
    return float(np.median([_timed_loop(function, args, repeat) for _ in range(rounds)]))


def time_student(function, *args, case: str, what: str, repeat: int = 10, rounds: int = 5) -> float:
    """Like :func:`time_ms` for the student's function: the guard is entered once per round."""
    run_student(function, *args, case=case, what=what)  # warm-up: compilation, module load
    times = []
    for _ in range(rounds):
        times.append(call_student(_timed_loop, function, args, repeat, case=case, what=what))
    _cp.cuda.Device().synchronize()
    return float(np.median(times))


def copy_bandwidth(nbytes: int = 2**30) -> float:
    """Device-to-device copy, bytes read + written per second (the practical memory ceiling)."""
    src = _cp.empty(nbytes // 4, dtype=_cp.float32)
    src.fill(1.0)
    dst = _cp.empty_like(src)
    ms = time_ms(lambda: dst.__setitem__(Ellipsis, src), repeat=5, rounds=3)
    del src, dst
    return 2 * nbytes / (ms * 1e-3)


# --- compute-sanitizer ---------------------------------------------------------------------

def sanitizer_path() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "bin", "compute-sanitizer")):
            return os.path.join(home, "bin", "compute-sanitizer")
    return None


_SANITIZER = sanitizer_path()
_allow = getattr(guard, "allow_grader_program", None)
if _SANITIZER and _allow is not None:  # the worker's guard refuses new processes once student code ran
    _allow(_SANITIZER)

#: Larger than the furthest a tile load can overrun: 31 rows of d = 128 floats past the end (lesson 08).
SANITIZER_PADDING_BYTES = 64 * 1024

_SUMMARY = re.compile(r"(RACECHECK|ERROR) SUMMARY: (\d+) (?:hazards? displayed \((\d+) errors?, (\d+) warnings?\)|errors?)")


@dataclasses.dataclass(frozen=True)
class SanitizerReport:
    errors: int
    warnings: int
    log: str
    returncode: int


def sanitize(function, inputs: str, case: dict, *, tool: str = "racecheck", timeout_s: float = 75.0) -> SanitizerReport:
    """Run ``function(*inputs(**case))`` under compute-sanitizer in a child process.

    ``inputs`` names a grader function ("module:function") that builds the arguments on the GPU;
    the student's function travels by value (cloudpickle), as to the worker.
    """
    import cloudpickle

    sanitizer = _SANITIZER
    if sanitizer is None:
        purpose = "гонок в разделяемой памяти" if tool == "racecheck" else "выходов за границы массивов"
        raise CheckFailed(f"не найден compute-sanitizer (входит в CUDA Toolkit): проверка {purpose} "
                          "на этой машине невозможна, и эта проверка не засчитывается (0 баллов), а не "
                          "пропускается. В Colab он есть в /usr/local/cuda/bin; на машине преподавателя "
                          "проверка пройдёт полностью.")
    payload = pickle.dumps({"function": cloudpickle.dumps(function), "inputs": inputs, "case": case,
                            "tool": tool})
    with tempfile.TemporaryDirectory(prefix="autograder-sanitize-") as folder:
        log_path = os.path.join(folder, "sanitizer.log")
        # memcheck knows allocations, not which one a pointer came from: a read past K that lands in V
        # is "valid".  Padding after every allocation (never a valid address) makes such a read an error.
        padding = ["--padding", str(SANITIZER_PADDING_BYTES)] if tool == "memcheck" else []
        command = [sanitizer, "--tool", tool, *padding, "--log-file", log_path, "--print-limit", "20",
                   sys.executable, "-I", "-c", "from autograder.gpu import _sanitize_child; _sanitize_child()"]
        try:
            done = subprocess.run(command, input=payload, capture_output=True, timeout=timeout_s, cwd=folder)
        except subprocess.TimeoutExpired:
            raise CheckFailed(f"запуск под compute-sanitizer не завершился за {timeout_s:g} с "
                              "(ядро не завершается?).") from None
        log = open(log_path, encoding="utf-8", errors="replace").read() if os.path.exists(log_path) else ""
    errors = warnings = 0
    summaries = _SUMMARY.findall(log)
    for kind, total, errs, warns in summaries:
        errors += int(errs) if errs else int(total)
        warnings += int(warns or 0)
    if done.returncode != 0 and not errors:
        tail = (done.stdout + done.stderr).decode("utf-8", "replace").strip()[-600:]
        raise CheckFailed(f"запуск под compute-sanitizer завершился с кодом {done.returncode}"
                          + (f":\n{tail}" if tail else "") + _explain_cuda(tail))
    if not summaries:
        raise CheckFailed("compute-sanitizer не выдал итогов проверки:\n" + shorten(log[-600:], 600))
    return SanitizerReport(errors, warnings, log, done.returncode)


def _sanitize_child() -> None:
    """Inside compute-sanitizer: build the inputs, run the student's function once, wait."""
    import importlib

    global _EXACT_ALLOCATIONS
    request = pickle.loads(sys.stdin.buffer.read())
    if request.get("tool") == "memcheck":  # no pool: memcheck sees each array's exact bounds
        _EXACT_ALLOCATIONS = True
        _cp.cuda.set_allocator(None)
    module, name = request["inputs"].split(":")
    args = getattr(importlib.import_module(module), name)(**request["case"])
    _warm_up()
    guard.install(gpu=True)
    with guard.student_code():
        function = pickle.loads(request["function"])
        function(*args)
    _cp.cuda.Device().synchronize()


def sanitizer_check(function, inputs: str, case_args: dict, case: str, *, races: bool) -> list[str]:
    """memcheck, then (``races``) racecheck of one case; CheckFailed with the tool's findings.

    The caller has already checked the case's values: the sanitizer answers only for what values
    cannot show (an out-of-bounds read or write that does not change the output, a race that did
    not fire).  Returns the parts of the verdict, e.g. ["memcheck: 0 ошибок", "racecheck: 0 гонок"].
    """
    report = sanitize(function, inputs, case_args, tool="memcheck")
    if report.errors:
        raise CheckFailed(memcheck_message(report, case))
    done = ["memcheck: 0 ошибок"]
    if races:
        report = sanitize(function, inputs, case_args, tool="racecheck")
        if report.errors:
            raise CheckFailed(race_message(report, case))
        done.append("racecheck: 0 гонок")
    return done


def race_message(report: SanitizerReport, case: str) -> str:
    hazards = [line.strip(" =") for line in report.log.splitlines()
               if "hazard" in line.lower() or "race reported" in line.lower()][:6]
    return shorten(
        f"compute-sanitizer --tool racecheck нашёл гонки в разделяемой памяти: {report.errors} ошибок "
        f"(случай: {case}).\n" + "\n".join(hazards) +
        "\nПодсказка: нет __syncthreads() между записью в __shared__ одними потоками и чтением "
        "другими (после загрузки тайла, после записи частичных сумм) или перед перезаписью тайла. "
        "Результат при этом может случайно совпасть с эталоном — гонка от этого не исчезает.", 1500)


def memcheck_message(report: SanitizerReport, case: str) -> str:
    found = [line.strip(" =") for line in report.log.splitlines()
             if "Invalid" in line or "out of bounds" in line or "Address" in line][:6]
    return shorten(
        f"compute-sanitizer --tool memcheck нашёл обращения за пределы массивов: {report.errors} ошибок "
        f"(случай: {case}).\n" + "\n".join(found) +
        "\nПодсказка: поток с индексом i ≥ n читает или пишет элемент — нет защиты хвоста "
        "`if (i < n)` при числе блоков, округлённом вверх; или неверен индекс строки/столбца у краёв "
        "тайла. Такая ошибка может не менять результат и не ронять ядро, но портит чужую память.", 1500)
