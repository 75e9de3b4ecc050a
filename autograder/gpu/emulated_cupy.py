"""A stand-in for CuPy whose kernels run on the PTX emulator (:mod:`autograder.gpu.emulator`): no GPU needed.

What the course's wrappers use is here: ``RawKernel`` (NVRTC PTX for the GPU it poses as, then the emulator;
options such as ``-DBC=64``; ``max_dynamic_shared_size_bytes``), device arrays (:class:`ndarray`, a NumPy array
that stands for device memory: ``get``, ``set``, slicing, arithmetic; a view passed to a kernel points into the
array it views, as on a GPU), ``asarray``/``asnumpy``/``empty``/``zeros``/``ones``/``full``/``*_like``/
``ascontiguousarray`` (float64 by default, as CuPy's), the dtypes, ``cuda.Device()`` (by default the attributes
of a T4, the GPU a student without one is most likely to get, and compute_75 PTX; or an H200's, :data:`DEVICES`),
``cuda.runtime.getDeviceProperties``, ``cuda.Event`` (recorded, never timed: ``cuda.get_elapsed_time`` says the
emulator does not measure time), ``random.standard_normal``/``random``/``rand``/``randn``.  New arrays from
``empty`` are filled with NaN bytes (0xFF), as the GPU checks fill every new allocation.  Anything else fails
with a message that names it, never with a wrong answer.

Every launch is appended to :data:`LAUNCHES` (kernel name and the emulator's :class:`~.emulator.Result`).  A fatal
finding (out of bounds, misaligned, unsupported, timeout) raises :class:`EmulatedFault`, as a GPU raises a CUDA
error; the others (races, uninitialised shared reads, divergent barriers) are only recorded: whoever runs the
code decides what they cost (a race must fail the check that ran it: lockstep hides races in the values).

``autograder.gpu.runtime.stand_in`` puts it in place of ``cupy`` and of the GPU runtime's device memory (for a
block: a GPU check run without a GPU, the bank comparison; for good: a notebook's ``cp`` without a GPU).  Device
memory is counted as the GPU path counts it (:class:`DeviceAllocations`: every array the stand-in allocates); a
check's findings become its failure through :func:`findings_message`.  Nothing here imports the grader.
"""
from __future__ import annotations

import sys
import types

import numpy as np

from ..checks.core import ExplainedError
from . import nvrtc
from .allocations import AllocationSizes
from .emulator import launch
from .emulator.findings import FATAL

#: ``cuda.Device().attributes`` of a Tesla T4 (the CUDA runtime's names).
T4_ATTRIBUTES = {
    "MaxThreadsPerBlock": 1024, "MaxSharedMemoryPerBlock": 48 * 1024, "MaxSharedMemoryPerBlockOptin": 64 * 1024,
    "MaxSharedMemoryPerMultiprocessor": 64 * 1024, "MultiProcessorCount": 40, "WarpSize": 32,
    "ComputeCapabilityMajor": 7, "ComputeCapabilityMinor": 5, "MaxRegistersPerBlock": 65536,
    "MaxThreadsPerMultiProcessor": 1024, "L2CacheSize": 4 * 2**20,
}
#: ``cuda.runtime.getDeviceProperties`` of a Tesla T4 (the keys the lessons read).
T4_PROPERTIES = {"name": b"Tesla T4 (emulated)", "major": 7, "minor": 5, "multiProcessorCount": 40, "warpSize": 32,
                 "maxThreadsPerBlock": 1024, "maxThreadsPerMultiProcessor": 1024, "regsPerMultiprocessor": 65536,
                 "sharedMemPerBlock": 48 * 1024, "sharedMemPerBlockOptin": 64 * 1024,
                 "sharedMemPerMultiprocessor": 64 * 1024, "l2CacheSize": 4 * 2**20, "totalGlobalMem": 15 * 2**30}

#: ``cuda.Device().attributes`` and properties of an H200 where they differ from the T4's (227 KiB of shared
#: memory per block, 132 SMs): for comparing with runs on the H200 (``stand_in("H200")``; PTX for compute_80,
#: the newest virtual architecture the emulator runs).
H200_ATTRIBUTES = {**T4_ATTRIBUTES, "MaxSharedMemoryPerBlockOptin": 227 * 1024, "MultiProcessorCount": 132,
                   "MaxSharedMemoryPerMultiprocessor": 228 * 1024, "ComputeCapabilityMajor": 9,
                   "ComputeCapabilityMinor": 0, "MaxThreadsPerMultiProcessor": 2048, "L2CacheSize": 60 * 2**20}
H200_PROPERTIES = {**T4_PROPERTIES, "name": b"NVIDIA H200 (emulated)", "major": 9, "minor": 0,
                   "multiProcessorCount": 132, "maxThreadsPerMultiProcessor": 2048, "sharedMemPerBlockOptin": 227 * 1024,
                   "sharedMemPerMultiprocessor": 228 * 1024, "l2CacheSize": 60 * 2**20, "totalGlobalMem": 141 * 10**9}
#: The GPUs the stand-in can pose as: (virtual architecture, attributes, properties).
DEVICES = {"T4": ("compute_75", T4_ATTRIBUTES, T4_PROPERTIES), "H200": ("compute_80", H200_ATTRIBUTES, H200_PROPERTIES)}
_device_profile = DEVICES["T4"]

#: Every launch since the last :func:`reset`: (kernel name, emulator result).
LAUNCHES: list = []
#: Whether the stand-in is in ``cupy``'s place (``autograder.gpu.runtime.stand_in``).
ACTIVE = False


class EmulatedFault(RuntimeError, ExplainedError):
    """A kernel did what stops a GPU (an illegal address, a misaligned access) or what the emulator cannot run."""


#: The allocation counters (:class:`DeviceAllocations`) open now: each new device array is counted in every one.
_COUNTERS: list = []


class ndarray(np.ndarray):
    """A device array: NumPy memory that stands for the GPU's."""

    def __array_finalize__(self, obj):
        # A new device allocation: memory NumPy allocated for this array (a copy, astype), or a fresh plain array
        # this one wraps (what the stand-in's constructors — empty, zeros, asarray ... — make and view, an
        # elementwise operation's result).  A view of a device array (a slice, .T, reshape) has that array as its
        # base: nothing new.
        if not _COUNTERS:
            return
        base = self.base
        if base is None:
            size = self.nbytes
        elif type(base) is np.ndarray and base.base is None:
            size = base.nbytes
        else:
            return
        for counter in _COUNTERS:
            counter.sizes.append(int(size))

    def get(self):
        return np.array(self, copy=True).view(np.ndarray)

    def set(self, array):
        self[...] = np.asarray(array)


def _device(array) -> ndarray:
    return np.array(array, copy=True).view(ndarray)


def asarray(a, dtype=None):
    if isinstance(a, ndarray) and (dtype is None or a.dtype == np.dtype(dtype)):
        return a
    return _device(np.asarray(a, dtype=dtype))


def ascontiguousarray(a, dtype=None):
    return _device(np.ascontiguousarray(a, dtype=dtype))


def asnumpy(a):
    return np.array(a, copy=True).view(np.ndarray)


def empty(shape, dtype=np.float64, order="C"):
    out = np.empty(shape, dtype=dtype, order=order).view(ndarray)
    out.view(np.uint8)[...] = 0xFF  # NaN in every float, -1 in every integer: unwritten elements show
    return out


def empty_like(a, dtype=None):
    return empty(np.shape(a), dtype=a.dtype if dtype is None else dtype)


def zeros(shape, dtype=np.float64):
    return np.zeros(shape, dtype=dtype).view(ndarray)


def zeros_like(a, dtype=None):
    return zeros(np.shape(a), dtype=a.dtype if dtype is None else dtype)


def ones(shape, dtype=np.float64):
    return np.ones(shape, dtype=dtype).view(ndarray)


def ones_like(a, dtype=None):
    return ones(np.shape(a), dtype=a.dtype if dtype is None else dtype)


def full(shape, fill_value, dtype=None):
    return np.full(shape, fill_value, dtype=dtype).view(ndarray)


class DeviceAllocations(AllocationSizes):
    """:class:`autograder.gpu.runtime.DeviceAllocations` on the stand-in: every device array made while the block
    runs (``sizes``, ``total``, ``largest``).  No guard bytes: the emulator checks every access against its
    allocation, and a stray one is a finding."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def __enter__(self):
        _COUNTERS.append(self)
        return self

    def __exit__(self, *exc):
        _COUNTERS.remove(self)
        return False

    def damaged_guards(self) -> list:
        return []

    def release(self) -> None:
        pass


#: The PTX this process made, by (source, options, architecture), the most recent :data:`_PTX_KEPT`: CuPy too
#: compiles a source once per process however many ``RawKernel`` objects a wrapper makes of it (a wrapper that
#: builds its kernel inside the function would otherwise pay NVRTC, ~0.7 s, on every call).
_PTX: dict[tuple, str] = {}
_PTX_KEPT = 32


def _ptx_of(code: str, options: tuple, arch: str) -> str:
    key = (code, options, arch)
    if key not in _PTX:
        made = nvrtc.ptx(code, arch=arch, options=options)
        while len(_PTX) >= _PTX_KEPT:
            del _PTX[next(iter(_PTX))]
        _PTX[key] = made
    return _PTX[key]


class RawKernel:
    """``cupy.RawKernel``: the source is compiled to PTX when first launched and run on the emulator."""

    def __init__(self, code: str, name: str, options=(), backend: str = "nvrtc", **kwargs):
        self.code, self.name, self.options = code, name, tuple(options)
        self.max_dynamic_shared_size_bytes = 0
        self._ptx = None

    @property
    def attributes(self) -> dict:
        return {"max_dynamic_shared_size_bytes": self.max_dynamic_shared_size_bytes,
                "max_threads_per_block": T4_ATTRIBUTES["MaxThreadsPerBlock"]}

    def __call__(self, grid, block, args, *, shared_mem: int = 0, stream=None, enable_cooperative_groups=False):
        if self._ptx is None:
            self._ptx = _ptx_of(self.code, self.options, _device_profile[0])
        optin = _device_profile[1]["MaxSharedMemoryPerBlockOptin"]
        if self.max_dynamic_shared_size_bytes > optin:
            raise EmulatedFault(f"cudaErrorInvalidValue: max_dynamic_shared_size_bytes = "
                                f"{self.max_dynamic_shared_size_bytes} Б больше допустимого на этом GPU ({optin} Б)")
        limit = max(T4_ATTRIBUTES["MaxSharedMemoryPerBlock"], self.max_dynamic_shared_size_bytes)
        if shared_mem > limit:
            raise EmulatedFault(f"cudaErrorInvalidValue: shared_mem={shared_mem} Б больше допустимого ({limit} Б; "
                                "больше 48 КиБ — только после kernel.max_dynamic_shared_size_bytes = ...)")
        values = [a.view(np.ndarray) if isinstance(a, np.ndarray) else a for a in args]
        result = launch(self._ptx, self.name, grid, block, values, shared_mem)
        LAUNCHES.append((self.name, result))
        fatal = [f for f in result.findings if f.kind in FATAL]
        if fatal:
            __tracebackhide__ = True  # IPython: the student's cell is the frame to show, not the stand-in's
            raise EmulatedFault(fault_message(self.name, fatal[0], result.findings))


class _Device:
    def __init__(self, device: int = 0):
        self.id = device
        self.attributes = dict(_device_profile[1])
        self.compute_capability = f"{self.attributes['ComputeCapabilityMajor']}{self.attributes['ComputeCapabilityMinor']}"

    def synchronize(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Event:
    """``cupy.cuda.Event``: it can be recorded and waited for; the time between two cannot be read (the emulator
    does not model time)."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass

    @property
    def done(self) -> bool:
        return True


def _elapsed_time(start, end):
    raise NotImplementedError("время на эмуляторе GPU не измеряется (cupy.cuda.get_elapsed_time): эмулятор "
                              "проверяет, что ядро считает верно, но не моделирует его скорость. Замерьте время "
                              "на GPU (Colab) или посмотрите числа H200 в тексте урока.")


cuda = types.SimpleNamespace(
    Device=_Device,
    runtime=types.SimpleNamespace(getDeviceCount=lambda: 1,
                                  getDeviceProperties=lambda device=0: dict(_device_profile[2])),
    Event=_Event,
    get_elapsed_time=_elapsed_time,
)


def _random_array(make):
    def on_device(size=None, dtype=np.float64):
        return np.asarray(make(size), dtype=dtype).view(ndarray)
    return on_device


#: ``cupy.random``: the functions a wrapper or a demo cell uses to make inputs (other numbers than CuPy's).
random = types.SimpleNamespace(
    standard_normal=_random_array(lambda size: np.random.default_rng().standard_normal(size)),
    random=_random_array(lambda size: np.random.default_rng().random(size)),
    rand=lambda *shape, dtype=np.float64: np.asarray(np.random.default_rng().random(shape), dtype).view(ndarray),
    randn=lambda *shape, dtype=np.float64: np.asarray(np.random.default_rng().standard_normal(shape),
                                                      dtype).view(ndarray),
)

float16, float32, float64 = np.float16, np.float32, np.float64
int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64
bool_ = np.bool_
__version__ = "emulated"


def reset() -> None:
    LAUNCHES.clear()


def findings() -> list:
    """Every finding of every launch since :func:`reset`."""
    return [f for _, result in LAUNCHES for f in result.findings]


def __getattr__(name: str):
    if hasattr(np, name) and callable(getattr(np, name)):  # elementwise helpers a wrapper may use (sqrt, exp, ...)
        fn = getattr(np, name)

        def on_device(*args, **kwargs):
            out = fn(*args, **kwargs)
            return out.view(ndarray) if isinstance(out, np.ndarray) else out
        return on_device
    raise AttributeError(f"эмулятор GPU не поддерживает cupy.{name}: запустите эту ячейку на GPU (Colab)")


# --- posing as a GPU; what a check that ran here says ----------------------------------------------

def pose_as(device: str) -> str:
    """Pose as ``device`` (:data:`DEVICES`: the limits wrappers read, the PTX architecture); the previous one."""
    global _device_profile
    previous = next(name for name, profile in DEVICES.items() if profile is _device_profile)
    _device_profile = DEVICES[device]
    return previous


class _StandInModule(types.ModuleType):
    """This module's type: it pickles (cloudpickle, a student's function that uses ``cp``) as a reference to
    ``cupy``, as CuPy does, so that the worker that unpickles it (which installed the stand-in first,
    ``runtime.use_emulator_without_gpu``) gives the function the stand-in again, and the guard sees no import of the
    grader."""

    def __reduce__(self):
        import importlib

        return importlib.import_module, ("cupy",)


sys.modules[__name__].__class__ = _StandInModule
# What a student's notebook may hold at its top level (a kernel, a device array) pickles by reference to ``cupy``
# too, never to the grader's package (which the guard does not let student objects import).
for _class in (ndarray, RawKernel, _Device, _Event):
    _class.__module__ = "cupy"

#: Said under every verdict of a check that ran on the emulator.
EMULATED = "проверено на эмуляторе GPU"

#: What to do about each kind of finding (the findings themselves say where).
ADVICE = {
    "race": "между записью в __shared__ одними потоками и чтением другими (после загрузки тайла, после записи "
            "частичных сумм) или перед перезаписью тайла нужен __syncthreads()",
    "global_race": "два потока пишут разные значения в один элемент: у каждого выходного элемента должен быть "
                   "один поток-писатель (или atomicAdd)",
    "uninitialized_shared": "ядро читает разделяемую память, в которую никто не писал: на GPU там мусор — "
                            "проверьте границы цикла загрузки тайла и защиту хвоста",
    "cp_async_pending": "чтение тайла до cp.async.wait_group / wait_all: дождитесь копирования, затем __syncthreads()",
    "divergent_barrier": "__syncthreads() внутри if, который потоки блока проходят по-разному: вынесите барьер "
                         "из ветвления",
    "barrier_after_exit": "часть потоков вышла из ядра (return) или обошла __syncthreads() внутри if, а остальные "
                          "ждут их на барьере: вынесите __syncthreads() из if, а вместо раннего return оберните "
                          "работу в if и дойдите до барьера всеми потоками",
    "global_oob": "проверьте формулу индекса и защиту хвоста (if (i < n)) у каждого чтения и записи этого массива: "
                  "потоки последнего блока, которым не хватило элементов, не должны к нему обращаться",
    "shared_oob": "проверьте размер массива __shared__ (или shared_mem= при запуске для extern __shared__) и "
                  "индексы, которыми потоки в него пишут и читают",
    "local_oob": "индекс локального массива потока вышел за его размер: проверьте границы цикла",
    "misaligned": "адрес доступа должен делиться на его размер: проверьте смещения и приведения указателей "
                  "(float4, int2 …) и что массив не начат с нечётного элемента",
    "timeout": "проверьте условие выхода из циклов ядра (счётчик растёт? граница та?)",
    "partial_warp_collective": "__shfl_sync / __ballot_sync / mma.sync вызваны не всеми потоками из маски: "
                               "вызывайте их всем варпом, а лишние потоки отбрасывайте после",
}


#: Findings that may have made a later fault: a read of garbage (an index, an address) is where the bug is, the fault
#: only where the garbage was used.
CAUSES = ("uninitialized_shared", "race", "cp_async_pending")


def fault_message(kernel: str, fatal, found: list) -> str:
    """Why the launch of ``kernel`` stopped (``fatal``), with what to do; and the first finding of ``found`` that
    may have caused it (a read of shared memory nobody wrote, a race), which the fault's own line does not show."""
    lines = [f"ядро {kernel} остановлено эмулятором GPU: {fatal}"]
    if fatal.kind in ADVICE:
        lines.append(f"Что сделать: {ADVICE[fatal.kind]}.")
    cause = next((f for f in found if f.kind in CAUSES), None)
    if cause is not None:
        lines.append(f"До этого эмулятор заметил: {cause}\nСкорее всего, остановка — его следствие (мусорный индекс "
                     f"или адрес): {ADVICE[cause.kind]}.")
    return "\n".join(lines)


def findings_message(found: list) -> str:
    """The failure for a check whose launches had findings: the first of each kind, where, and what to do."""
    first = {}
    for finding in found:
        first.setdefault(finding.kind, finding)
    lines = [f"Эмулятор GPU нашёл в ядре ошибки, которые на GPU могли не изменить ответ ({len(found)} шт.):"]
    for kind, finding in first.items():
        lines.append(f"- {finding}" + (f"\n  Что сделать: {ADVICE[kind]}." if kind in ADVICE else ""))
    lines.append("Совпадение с эталоном при этом ничего не доказывает: на эмуляторе потоки идут в другом порядке, "
                 "чем на GPU, и гонка или чтение мусора могут не проявиться в числах ни там, ни там.")
    return "\n".join(lines)
