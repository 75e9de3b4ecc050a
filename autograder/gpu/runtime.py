"""GPU lessons (06-09 and 11) at run time: is there a GPU, GPU checks, student kernels, device memory, timing.

Compilation (no GPU needed) is :mod:`autograder.gpu.nvrtc`; compute-sanitizer is :mod:`autograder.gpu.sanitizer`.

* :func:`choose_cupy` is the notebooks' ``cp``: CuPy on a GPU, else the PTX emulator's stand-in for it
  (:mod:`autograder.gpu.emulated_cupy`), unless :data:`EMULATOR_ENV` turns the emulator off.
* :func:`gpu_check` registers a check that runs kernels: on a GPU there; without one on the emulator (its
  findings fail the check; the verdict says «проверено на эмуляторе GPU»), except timed checks and those not
  on the emulator yet, which fail with 0 points and «нужен GPU», never pass.  Each check already runs in its
  own worker process (:mod:`autograder.isolation.run`), so a kernel that faults or hangs costs only that check.
* :class:`DeviceAllocations` observes every device allocation through CuPy's allocator hook,
  fills it with NaN before student code sees it and surrounds it with guard bytes that are
  checked after the call (:func:`run_student` does this for every call of student code);
  :func:`time_student` / :func:`time_ms` time with CUDA events.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import os

import numpy as np

from ..checks import student_process
from ..checks.core import CheckFailed, call_student, check, describe_case, get_check, shorten
from ..checks.failures import restated
from . import judged
from .allocations import AllocationSizes

try:  # imported before any student code runs (the worker imports the check module first)
    import cupy as _cp
except Exception:  # no CuPy (laptops, CI): compile checks still run, GPU checks say "нужен GPU"
    _cp = None

#: Set to e.g. "75" to build every CuPy kernel as compute_75 PTX, JIT-compiled by the driver of a newer
#: GPU: on an H200 this proves that the kernels and checks work on sm_75 (``__CUDA_ARCH__`` is 750).
FORCE_PTX_ENV = "AUTOGRADER_FORCE_PTX_ARCH"


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
    """(True, description) on a machine with a usable CUDA GPU and CuPy, else (False, why not).  The emulator's
    stand-in (:func:`choose_cupy`) is not a GPU: with it in place this says why there is no real one.  In a check's
    judge, as its student process says it (:func:`judged.status`)."""
    if student_process.judging():
        return judged.status()[:2]
    if emulated():
        return False, _why_no_gpu
    if _cp is None:
        return False, "CuPy не установлен"
    try:
        count = _cp.cuda.runtime.getDeviceCount()
    except Exception as error:  # no driver: cudaErrorInsufficientDriver / NoDevice
        return False, f"нет драйвера CUDA или GPU ({type(error).__name__}: {shorten(str(error), 200)})"
    if count < 1:
        return False, "GPU не найден"
    props = _cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return True, f"{name}, compute capability {props['major']}.{props['minor']}, CuPy {_cp.__version__}"


#: Why there is no GPU, as :func:`gpu_status` said before the emulator's stand-in took ``cupy``'s place for good
#: (:func:`use_emulator_without_gpu`), and that :func:`stand_in`.
_why_no_gpu, _for_good = "GPU нет", None

#: Whether GPU checks and the notebooks' ``cp`` run on the PTX emulator where there is no GPU: "1" (the default)
#: or "0" (no ``cp``; GPU checks fail with «нужен GPU», 0 points).  ``course autograde`` and nbgrader set it from
#: ``nbgrader_config.py`` (``IsolatedExecute.gpu_emulator``).
EMULATOR_ENV = "AUTOGRADER_GPU_EMULATOR"


def emulator_allowed() -> bool:
    return os.environ.get(EMULATOR_ENV, "1").strip().lower() not in ("0", "off", "no", "false")


def emulated() -> bool:
    """Whether the CuPy stand-in of the emulator is in place now (a notebook without a GPU, a check run there; in a
    check's judge: in its student process)."""
    from . import emulated_cupy

    if student_process.judging():
        return judged.status()[2]
    return emulated_cupy.ACTIVE


EMULATOR_LINE = ("GPU нет ({why}): ядра запускаются на эмуляторе GPU, который изображает NVIDIA T4 (GPU бесплатного "
                 "Colab). Он выполняет ядро поток за потоком, проверяет каждое обращение к памяти и гонки, но не "
                 "измеряет время; ячейки с замерами скорости пропускаются.")


def describe_gpu() -> str:
    """One line for the notebooks: which GPU the kernels run on, the emulator, or why neither."""
    ok, text = gpu_status()
    if ok:
        return f"GPU: {text}. Ядра запускаются на нём."
    if emulated() or emulator_allowed():
        return EMULATOR_LINE.format(why=text)
    return (f"GPU недоступен: {text}, а эмулятор GPU выключен ({EMULATOR_ENV}=0). Ядро всё равно компилируется "
            "(NVRTC) и проверяется на ошибки; проверки запуска покажут «нужен GPU» (0 баллов). Откройте ноутбук "
            "в Colab с GPU.")


@contextlib.contextmanager
def stand_in(device: str = "T4"):
    """For the block, ``cupy`` is the PTX emulator's stand-in (:mod:`autograder.gpu.emulated_cupy`, posing as
    ``device``: its limits, which wrappers read, and its PTX architecture) and so is this module's device memory.

    The guard bytes and allocator hook of the GPU path are CuPy internals; on the emulator every access is checked
    against its allocation instead, so :func:`device` becomes a plain copy, :func:`run_student` a plain call that
    says the verdict is the emulator's, and :class:`DeviceAllocations` the stand-in's counter of its arrays.
    """
    import sys

    from ..isolation import guard
    from . import emulated_cupy

    def plain_call(function, *args, case: str, what: str, **kwargs):
        try:
            return call_student(function, *args, case=case, what=what, **kwargs)
        except CheckFailed as failure:  # the same reason for a CUDA error as on a GPU (run_student)
            raise restated(failure, f"{failure}{_explain_cuda(str(failure))} ({emulated_cupy.EMULATED})") from None

    here = sys.modules[__name__]
    replaced = {"_cp": emulated_cupy, "_device_here": emulated_cupy._device, "_run_student_here": plain_call,
                "require_gpu": lambda: None, "DeviceAllocations": emulated_cupy.DeviceAllocations}
    saved = {name: getattr(here, name) for name in replaced}
    saved_module, was_active = sys.modules.get("cupy"), emulated_cupy.ACTIVE
    previous_device = emulated_cupy.pose_as(device)
    sys.modules["cupy"] = emulated_cupy
    for name, value in replaced.items():
        setattr(here, name, value)
    emulated_cupy.ACTIVE = True
    guard.trust_grader_changes()  # the guard restores these modules after student code: this is the grader's
    try:
        yield emulated_cupy
    finally:
        for name, value in saved.items():
            setattr(here, name, value)
        if saved_module is None:
            sys.modules.pop("cupy", None)
        else:
            sys.modules["cupy"] = saved_module
        emulated_cupy.pose_as(previous_device)
        emulated_cupy.ACTIVE = was_active
        guard.trust_grader_changes()


def use_emulator_without_gpu() -> tuple[bool, str]:
    """(whether there is a GPU, why not); without one, the emulator allowed, :func:`stand_in` (a T4) for the rest
    of the process.  Called by :func:`choose_cupy` (a notebook) and, through ``before_payload`` of every GPU check,
    by its worker before it unpickles the student's objects (the stand-in's module pickles as ``cupy``)."""
    global _why_no_gpu, _for_good
    ok, why = gpu_status()
    if not ok and not emulated() and emulator_allowed():
        _why_no_gpu, _for_good = why, stand_in("T4")  # kept: a collected generator would put CuPy back
        _for_good.__enter__()
    return ok, why


def facts() -> tuple[bool, str, bool]:
    """(a GPU is used, its description or why not, the emulator's stand-in is in place) in this process."""
    ok, why = gpu_status()
    return bool(ok), str(why), bool(emulated())


def prepare_gpu_check() -> tuple[bool, str, bool]:
    """A GPU check's ``before_payload``, in its student process before any student code exists there:
    :func:`use_emulator_without_gpu`, then :func:`facts` — what the judge believes of that process's GPU."""
    use_emulator_without_gpu()
    return facts()


def use_emulator_posing_as(device: str) -> tuple[bool, str, bool]:
    """For the rest of the process, :func:`stand_in` posing as ``device``, GPU or not: ``before_payload`` of a check
    that runs a student's function on the emulator on purpose (``sanitizer.EMULATOR_RUNS``); :func:`facts` then."""
    global _for_good
    if not emulated():
        _for_good = stand_in(device)  # kept: a collected generator would put CuPy back
        _for_good.__enter__()
    return facts()


def run_on_emulator(function, *args, **kwargs) -> str:
    """A GPU check's body on the stand-in (posing as a T4, unless it is in place already): its verdict, every verdict
    saying it ran there.

    One mapping from finding to check, the same as on a GPU: a fatal finding (out of bounds, misaligned) stops the
    kernel and fails the check that ran it, as a CUDA error does there; the others (races, reads of shared memory
    nobody wrote, barriers some threads never reach) fail only the lesson's bounds-and-races check
    (:func:`fail_on_findings`, called by ``sanitizer.sanitizer_verdict``), as the emulator, the bounds tool of a GPU
    machine too, fails it there.  A check whose values were wrong says the findings first (they name the defect,
    the values a symptom of it); one that passed says what the emulator saw and which check counts it."""
    from . import emulated_cupy

    mark = emulated_cupy.EMULATED
    with contextlib.nullcontext() if emulated() else stand_in("T4"):
        _reset_findings()
        try:
            detail = function(*args, **kwargs)
        except CheckFailed as failure:
            text = str(failure)
            found = [] if getattr(failure, "of_findings", False) else _findings()
            if found:  # what the emulator saw in the kernel names the defect; the failure, a symptom of it
                text = emulated_cupy.findings_message(found, then_failed=text.replace(f" ({mark})", ""))
            again = restated(failure, text if mark in text else f"{text} ({mark})")
            if found:
                again.mistake = None  # the finding is the hint, not the generic mistake the values resemble
            raise again from None
        except emulated_cupy.EmulatedFault as fault:
            raise CheckFailed(f"{fault} ({mark})") from None
        found = _findings()
    if found:
        kinds = ", ".join(dict.fromkeys(f.kind for f in found))
        noted = f"{mark}; эмулятор заметил в ядре: {kinds} — это засчитывается в проверке границ и гонок"
        return f"{detail} ({noted})" if detail else f"({noted})"
    return f"{detail} ({mark})" if detail else f"({mark})"


def fail_on_findings() -> None:
    """The bounds-and-races check on the stand-in: its launches' findings (since :func:`run_on_emulator` began)
    fail it, each kind once, where and what to do (lockstep hides races in the values)."""
    from . import emulated_cupy

    found = _findings()
    if found:
        failure = CheckFailed(emulated_cupy.findings_message(found))
        failure.of_findings = True  # run_on_emulator: they are this failure, not a cause to put before it
        raise failure


def _findings() -> list:
    """The emulator's findings of the launches since :func:`_reset_findings` (a judge's: its student process's)."""
    from . import emulated_cupy

    return judged.findings() if student_process.judging() else emulated_cupy.findings()


def _reset_findings() -> None:
    from . import emulated_cupy

    judged.reset_findings() if student_process.judging() else emulated_cupy.reset()


def run_check_on_emulator(run, *args, **kwargs) -> str:
    """A :func:`gpu_check`'s check (``run``, the registered function) as it runs without a GPU: its body through
    :func:`run_on_emulator`, on the cases sized for the emulator where the check has them."""
    function = run.__wrapped__
    if run.emulator_cases is not None:
        default = inspect.signature(function).parameters["cases"].default
        kwargs["cases"] = run.emulator_cases(kwargs.get("cases", default))
    return run_on_emulator(function, *args, **kwargs)


def stop_using_emulator() -> None:
    """Undo :func:`use_emulator_without_gpu` (the test suite, after a test that ran a notebook's setup cell in
    its own process)."""
    global _for_good
    if _for_good is not None:
        _for_good.__exit__(None, None, None)
        _for_good = None


def choose_cupy():
    """The notebooks' ``cp``: CuPy on a machine with a GPU, else the PTX emulator's stand-in for it
    (:mod:`autograder.gpu.emulated_cupy`, posing as a T4; None when :data:`EMULATOR_ENV` turns it off).
    Prints one line that says which."""
    ok, _ = use_emulator_without_gpu()
    print(describe_gpu())
    return _cp if ok or emulated() else None


def require_gpu() -> None:
    """Fail the running check with 0 points, clearly, when there is no GPU; warm CuPy up otherwise."""
    if student_process.judging():
        return judged.remote(require_gpu, device)
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


TIMED_WITHOUT_GPU = ("нужен GPU: {why}. Эта проверка измеряет время ядра, а эмулятор GPU проверяет, что ядро "
                     "считает верно, но не моделирует его скорость, поэтому без GPU она даёт 0 баллов. Запустите "
                     "ноутбук на GPU (Colab: Среда выполнения → Сменить среду выполнения → GPU).")
NOT_ON_EMULATOR = ("нужен GPU: {why}. Эта проверка не запускается на эмуляторе GPU (ей нужен сам GPU, например "
                   "compute-sanitizer), поэтому без GPU она даёт 0 баллов. Запустите ноутбук на GPU (Colab: Среда "
                   "выполнения → Сменить среду выполнения → GPU).")


def gpu_check(check_id: str, *, points: float, title: str, timeout_s: float = 60.0, timed: bool = False,
              emulator: bool = True, emulator_cases=None):
    """Register a check that runs kernels (no address-space cap).

    On a GPU it runs there.  Without one it runs on the PTX emulator (:func:`run_on_emulator`: the
    stand-in posing as a T4, a fatal finding failing it, the others the lesson's bounds-and-races check; each verdict
    saying so), except that a
    ``timed`` check fails (the emulator has no clock: 0 points, and why) and so does one with ``emulator=False``
    (a check that needs the GPU itself, such as compute-sanitizer's run) or with the emulator turned off (:data:`EMULATOR_ENV`): «нужен GPU»,
    never a pass.  ``emulator_cases(cases)``: the cases (the visible default or the hidden ones a test cell passes)
    as the emulator runs them, where the GPU's sizes would take it minutes.  (A caller that runs a check's body on
    the stand-in on purpose calls ``get_check(id).function.__wrapped__`` with its own cases, or
    :func:`run_check_on_emulator` for the check as a machine without a GPU runs it.)"""

    def register(function):
        @functools.wraps(function)
        def run(*args, **kwargs):
            ok, why = gpu_status()
            if ok:
                require_gpu()
                return function(*args, **kwargs)
            if timed:
                raise CheckFailed(TIMED_WITHOUT_GPU.format(why=why))
            if emulator and emulator_allowed():
                return run_check_on_emulator(run, *args, **kwargs)
            if emulator_allowed():
                raise CheckFailed(NOT_ON_EMULATOR.format(why=why))
            require_gpu()  # raises: «нужен GPU»
            return function(*args, **kwargs)

        run.on_emulator = emulator and not timed  # read by scores_without_gpu
        run.timed = timed  # graded by its kernel's time: is_timed
        run.emulator_cases = emulator_cases
        return check(check_id, points=points, title=title, timeout_s=timeout_s, memory_limit_gib=None,
                     needs_gpu=True, before_payload=prepare_gpu_check)(run)

    return register


def is_timed(check_id: str) -> bool:
    """Whether the check is graded by its kernel's time (``gpu_check(..., timed=True)``): it runs alone
    (:class:`autograder.isolation.check_pool.CheckPool`)."""
    return bool(getattr(get_check(check_id).function, "timed", False))


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
    "INVALID_VALUE": "неверные параметры запуска: в блоке не больше 1024 потоков (по z не больше 64), в сетке "
                     "по y и z не больше 65535 блоков, shared_mem не больше допустимого (больше 48 КиБ — только после "
                     "kernel.max_dynamic_shared_size_bytes = ...)",
    "InvalidValue": "неверные параметры запуска: в блоке не больше 1024 потоков (по z не больше 64), в сетке "
                    "по y и z не больше 65535 блоков, shared_mem не больше допустимого (больше 48 КиБ — только после "
                    "kernel.max_dynamic_shared_size_bytes = ...)",
    "LAUNCH_OUT_OF_RESOURCES": "не хватает регистров или разделяемой памяти для такого блока: уменьшите "
                               "число потоков в блоке или используйте __launch_bounds__",
    "CompileException": "ядро не компилируется: посмотрите на проверку компиляции выше",
    "Unsupported type": "в ядро CuPy передаёт только массивы CuPy (cp.asarray), числа NumPy (np.float32(a), "
                        "np.int32(n)) и числа Python; массив NumPy сначала перенесите на GPU: cp.asarray(x)",
}


def _explain_cuda(text: str) -> str:
    for key, hint in _CUDA_ERRORS.items():
        if key in text:
            return f"\nВероятная причина: {hint}."
    return ""


def run_student(function, *args, case: str, what: str, **kwargs):
    """Call the student's wrapper and wait for its kernels; CUDA errors get a Russian reason.

    Every device allocation made during the call is NaN-filled and guarded; after the call the guard
    bytes of those allocations and of the grader's inputs (:func:`device`) must be intact.  In a check's judge all of
    it happens in the student process (:func:`judged.run_student`); on the stand-in, :func:`stand_in`'s plain call.
    """
    if student_process.judging():
        counting = judged.counting()
        result, sizes = judged.remote(_run_counted, device, function, args, kwargs, case, what, counting)
        if counting:
            judged.add_sizes(sizes)
        return result
    return _run_student_here(function, *args, case=case, what=what, **kwargs)


def _run_counted(function, args: tuple, kwargs: dict, case: str, what: str, counting: bool):
    """In a judge's student process: :func:`run_student`, and the sizes of the device allocations it made where the
    judge counts them (a :class:`DeviceAllocations` block is open there)."""
    if not counting:
        return run_student(function, *args, case=case, what=what, **kwargs), None
    with DeviceAllocations() as seen:
        result = run_student(function, *args, case=case, what=what, **kwargs)
    return result, [int(size) for size in seen.sizes]


def _run_student_on_gpu(function, *args, case: str, what: str, **kwargs):
    with DeviceAllocations() as seen:
        try:
            result = call_student(function, *args, case=case, what=what, **kwargs)
        except CheckFailed as failure:
            raise restated(failure, f"{failure}{_explain_cuda(str(failure))}") from None
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


_run_student_here = _run_student_on_gpu  # stand_in: a plain call on the emulator


#: With causal tile skipping a kernel computes (N+1)/2N of the (Q tile, K/V tile) pairs: 0.53 at N = 16,
#: 0.56 for 128-row Q tiles and 64-row K/V tiles; without skipping, all of them.
CAUSAL_TILE_RATIO = 0.6
LARGEST_TILE = 128  # rows of a Q or K/V tile, the most the lessons' kernels use


def causal_tile_bound(n: int) -> float:
    """The most of the full count a causal kernel with tile skipping may compute at sequence length ``n``:
    :data:`CAUSAL_TILE_RATIO`, or for short sequences (the emulator's n = 256) what the largest tiles give,
    (N+1)/2N with N = n / 128 tiles, and 0.05 more (0.8 at n = 256; without skipping: 1)."""
    tiles = max(1, -(-n // LARGEST_TILE))
    return max(CAUSAL_TILE_RATIO, (tiles + 1) / (2 * tiles) + 0.05)


def causal_tile_counts(run_case, cases, *, rows: str = "Br") -> str:
    """The tile-counter check of the attention kernels (lessons 08 and 09).

    ``run_case(case, causal, counter)`` runs the student's function on one case with ``tile_counter=counter``
    and checks its values; the causal count must be at most :func:`causal_tile_bound` of the full one.
    ``rows`` names the Q-tile height as the lesson writes it.  Returns the verdict's detail line.
    """
    counts, ratio = {}, 0.0
    for c in cases:
        for is_causal in (False, True):
            counter = device(np.zeros(1, dtype=np.int32))
            run_case(c, is_causal, counter)
            counts[is_causal] = int(counter.get()[0])
        case = describe_case(**c)
        if counts[False] <= 0:
            raise CheckFailed(f"счётчик тайлов не изменился ({case}): ядро должно прибавлять к tile_counter "
                              "число вычисленных пар (тайл Q, тайл K/V) — например, один atomicAdd на блок в конце.")
        ratio, bound = counts[True] / counts[False], causal_tile_bound(c["n"])
        if ratio > bound:
            raise CheckFailed(
                f"causal: {counts[True]} пар тайлов против {counts[False]} без маски — доля {ratio:.2f}, а при "
                f"пропуске тайлов над диагональю она ≈ (N+1)/2N ≈ 0.5 (допустимо ≤ {bound:.3g}; {case}).\n"
                "Подсказка: маска применяется, но цикл по тайлам K/V идёт до конца последовательности. "
                f"Для блока строк [q0, q0 + {rows}) нужны ключи только до q0 + {rows} − 1.")
    return (f"пар тайлов: без маски {counts[False]}, causal {counts[True]} (доля вычисленных пар от полного перебора "
            f"{ratio:.2f}, не больше {bound:.3g})")


def to_host(got, *, shape: tuple[int, ...], case: str, name: str = "результат", dtype=np.float32) -> np.ndarray:
    """A cupy.ndarray of ``shape`` and ``dtype`` (float32 unless a lesson says) copied to the host;
    anything else is a failure.  The checks read the host copy (in a judge, the values the student process sent)."""
    host = host_copy(got)
    if host is None:
        hint = (" Верните массив CuPy (на GPU), не копируйте его на CPU (.get(), cp.asnumpy)."
                if isinstance(got, np.ndarray) else "")
        raise CheckFailed(f"{name} должен быть cupy.ndarray, а получено {type(got).__name__} "
                          f"(случай: {case}).{hint}")
    if tuple(host.shape) != tuple(shape):
        raise CheckFailed(f"{name}: форма {tuple(host.shape)}, ожидалась {tuple(shape)} (случай: {case}).")
    if host.dtype != np.dtype(dtype):
        raise CheckFailed(f"{name}: dtype {host.dtype}, ожидался {np.dtype(dtype).name} (случай: {case}).")
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


def host_copy(got) -> np.ndarray | None:
    """``got`` copied to the host when it is a device array (a ``cupy.ndarray`` exactly, or the stand-in's; in a
    judge, a :class:`judged.DeviceResult`), else None."""
    if student_process.judging():
        return judged.host_copy(got)
    return _cp.asnumpy(got) if _cp is not None and type(got) is _cp.ndarray else None


_EXACT_ALLOCATIONS = False  # under compute-sanitizer memcheck: plain cudaMalloc of the exact size


def device(array: np.ndarray):
    """A host array on the GPU: a fresh allocation with guard bytes, checked after each student call (in a judge,
    a :class:`judged.Input`: the array is put on the device in the student process, with the first call)."""
    if student_process.judging():
        return judged.Input(array)
    return _device_here(array)


def _device_on_gpu(array: np.ndarray):
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


_device_here = _device_on_gpu  # stand_in: a plain copy on the emulator


# --- observing device allocations ----------------------------------------------------------

GUARD_BYTES = 256  # before and after every allocation; 256 keeps CuPy's alignment
POISON = 0xFF      # every byte 0xFF: each float32 / float64 is a NaN, each int32 is -1


class DeviceAllocations(AllocationSizes):
    """Every allocation made through CuPy while the block runs: count, total and largest bytes.

    CuPy allocates all arrays through one allocator function; the hook wraps the default memory
    pool's ``malloc``.  Arrays that existed before (the inputs) are not counted.  Each allocation
    is filled with NaN (the pool hands back memory the grader just freed, so an element the
    kernel never writes could otherwise hold the right value by chance) and gets
    :data:`GUARD_BYTES` of the same pattern before and after it; :meth:`damaged_guards` reports
    writes into them.  Nested blocks share the outermost hook.
    """

    _active = None

    def __new__(cls):
        if student_process.judging():  # the student process counts; the judge adds up what it reports
            return judged.Allocations()
        return super().__new__(cls)

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
    if student_process.judging():
        return judged.remote(time_ms, device, function, *args, repeat=repeat, rounds=rounds, warmup=warmup)
    for _ in range(warmup):
        function(*args)
    _cp.cuda.Device().synchronize()
    return float(np.median([_timed_loop(function, args, repeat) for _ in range(rounds)]))


def time_student(function, *args, case: str, what: str, repeat: int = 10, rounds: int = 5) -> float:
    """Like :func:`time_ms` for the student's function: the guard is entered once per round."""
    if student_process.judging():
        return judged.remote(time_student, device, function, *args, case=case, what=what, repeat=repeat,
                             rounds=rounds)
    run_student(function, *args, case=case, what=what)  # warm-up: compilation, module load
    times = []
    for _ in range(rounds):
        times.append(call_student(_timed_loop, function, args, repeat, case=case, what=what))
    _cp.cuda.Device().synchronize()
    return float(np.median(times))


def compute_capability() -> int:
    """This GPU's compute capability as an int (90 for 9.0; 75 without CuPy); in a judge, its student process's."""
    if student_process.judging():
        value = judged.remote(compute_capability, device)
        return value if type(value) is int else 75
    return int(_cp.cuda.Device().compute_capability) if _cp is not None else 75


def attention_flops(H: int, n: int, d: int, causal: bool) -> float:
    """FLOPs of attention as the course counts them: 4·H·n²·d, half of that when causal."""
    return 4.0 * H * n * n * d / (2 if causal else 1)


def sdpa_ms(q, k, v, causal: bool, dtype: str | None = None) -> float | None:
    """torch's ``scaled_dot_product_attention`` on the same (H, n, d) device arrays: ms per call, median of
    three rounds (feedback beside the student's kernel); ``dtype`` ("float16", ...) converts the inputs first.
    None where torch is missing."""
    if student_process.judging():
        return judged.remote(sdpa_ms, device, q, k, v, causal, dtype)
    try:
        import torch
        import torch.nn.functional as F
    except Exception:
        return None
    tq, tk, tv = (torch.as_tensor(a, device="cuda")[None] for a in (q, k, v))
    if dtype is not None:
        tq, tk, tv = (t.to(getattr(torch, dtype)) for t in (tq, tk, tv))
    run = lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)  # noqa: E731
    for _ in range(2):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 3)
    return float(np.median(times))


def copy_bandwidth(nbytes: int = 2**30) -> float:
    """Device-to-device copy, bytes read + written per second (the practical memory ceiling)."""
    if student_process.judging():
        return judged.remote(copy_bandwidth, device, nbytes)
    src = _cp.empty(nbytes // 4, dtype=_cp.float32)
    src.fill(1.0)
    dst = _cp.empty_like(src)
    ms = time_ms(lambda: dst.__setitem__(Ellipsis, src), repeat=5, rounds=3)
    del src, dst
    return 2 * nbytes / (ms * 1e-3)


def scores_without_gpu(check) -> bool:
    """Whether a registered check can pass on a machine without a GPU: a CPU check, or a GPU check that runs on
    the emulator (not timed, not kept off it) while the emulator is allowed."""
    if not check.needs_gpu:
        return True
    return getattr(check.function, "on_emulator", False) and emulator_allowed()

