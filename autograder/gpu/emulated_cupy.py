"""A stand-in for CuPy whose kernels run on the PTX emulator (:mod:`autograder.gpu.emulator`): no GPU needed.

It behaves as CuPy 14 does wherever a student's code can tell, and that is proven, not assumed: a corpus of 619
snippets (argument marshalling of every Python and NumPy scalar type into every C parameter type, pointers, launch
configurations, views versus copies, creation, dtypes, reductions, constants) was observed with real CuPy on a GPU
and must come out the same here (``benchmarks/cupy_golden.py``, ``tests/golden/cupy/manifest.json``,
``tests/test_cupy_golden.py``; the few differences it cannot remove are listed there with why).

* ``RawKernel`` / ``RawModule(code=...)``: NVRTC PTX for the GPU it poses as, then the emulator (options such as
  ``-DBC=64``; ``max_dynamic_shared_size_bytes``).  Arguments are passed as CuPy passes them (:func:`marshalled`:
  a Python ``float`` is a double, a Python ``int`` an int64, so a kernel that declares ``float a`` reads garbage here
  as on a GPU); ``grid``/``block`` are tuples, each 0 counted as 1; what the driver refuses (a block of more than
  1024 threads, more shared memory than allowed) raises :class:`CUDADriverError` with CuPy's text and, in Russian,
  which limit.
* Device arrays (:class:`ndarray`, NumPy memory that stands for the GPU's): ``get``, ``set``, ``data.ptr``
  (a pointer a kernel can take), slicing (an element is a 0-d device array, as in CuPy), arithmetic and reductions
  on the device (a host NumPy array among the operands is refused, as in CuPy); a view passed to a kernel points into
  the array it views.  ``asarray``/``ascontiguousarray``/``array(copy=False)``/``astype(copy=False)`` return the
  input itself where CuPy does; ``empty`` fills new arrays with NaN bytes (0xFF), as the GPU checks fill every new
  allocation.  The rest of the array API is NumPy's on device arrays; the constants (``inf``, ``nan``, ``pi``,
  ``newaxis`` ...) and dtypes are NumPy's, as CuPy's are.
* ``cuda.Device()`` (by default the attributes of a T4, the GPU a student without one is most likely to get, and
  compute_75 PTX; or an H200's, :data:`DEVICES`), ``cuda.runtime``, ``cuda.Stream``, ``cuda.Event`` (recorded,
  never timed), ``random`` (seeded by ``random.seed``; other numbers than CuPy's),
  ``get_default_memory_pool`` (the live device arrays' bytes in CuPy's 512-byte units; no cached blocks).
* What it cannot emulate raises :class:`NotEmulated` (``cuda.get_elapsed_time``, ``RawModule(path=...)``): the
  grader's limitation, so a check that meets it is reported as not gradable here, never as the student's 0; an
  unknown name is an ``AttributeError`` that says the same.

Every launch is appended to :data:`LAUNCHES` (kernel name and the emulator's :class:`~.emulator.Result`).  A fatal
finding (out of bounds, misaligned, unsupported, timeout) raises :class:`EmulatedFault`, as a GPU raises a CUDA
error; the others (races, uninitialised shared reads, divergent barriers) are only recorded: whoever runs the
code decides what they cost (a race must fail the check that ran it: lockstep hides races in the values).

``autograder.gpu.runtime.stand_in`` puts it in place of ``cupy`` and of the GPU runtime's device memory (for a
block: a GPU check run without a GPU, the bank comparison; for good: a notebook's ``cp`` without a GPU).  Device
memory is counted as the GPU path counts it (:class:`DeviceAllocations`: every array the stand-in allocates); a
check's findings become its failure through :func:`findings_message`.  Of the grader it imports only the failures
(``checks.failures`` through ``checks.core``) and the compiler.
"""
from __future__ import annotations

import sys
import types
import weakref

import numpy as np

from ..checks.core import ExplainedError
from . import nvrtc
from .allocations import AllocationSizes
from .emulator import launch
from .emulator.findings import FATAL
from .emulator.memory import allocation_of

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


class CUDADriverError(RuntimeError, ExplainedError):
    """``cupy_backends.cuda.api.driver.CUDADriverError``: what CuPy raises where the driver refuses a launch (a block
    of more than 1024 threads, more shared memory than allowed, a kernel name the module lacks).  The message starts
    as CuPy's (``CUDA_ERROR_INVALID_VALUE: invalid argument``) and says, in Russian, which limit and what to do."""


CUDADriverError.__module__ = "cupy_backends.cuda.api.driver"
INVALID_VALUE = "CUDA_ERROR_INVALID_VALUE: invalid argument"


#: The allocation counters (:class:`DeviceAllocations`) open now: each new device array is counted in every one.
_COUNTERS: list = []


def _count(size: int) -> None:
    for counter in _COUNTERS:
        counter.sizes.append(int(size))


#: Live device allocations, ``id(memory) -> bytes`` (the memory pool's ``used_bytes``): an entry leaves when its
#: memory is freed.
_LIVE: dict[int, int] = {}


def _track(memory: np.ndarray) -> None:
    key = id(memory)
    if key not in _LIVE:
        _LIVE[key] = memory.nbytes
        weakref.finalize(memory, _LIVE.pop, key, None)


class ndarray(np.ndarray):
    """A device array: NumPy memory that stands for the GPU's."""

    def __array_finalize__(self, obj):
        # A new device allocation: memory NumPy allocated for this array (a copy, astype), or a fresh plain array
        # this one wraps (what the stand-in's constructors — empty, zeros, asarray ... — make and view, an
        # elementwise operation's result).  A view of a device array (a slice, .T, reshape) has that array as its
        # base: nothing new.
        root = self
        while isinstance(root.base, np.ndarray):
            root = root.base
            if isinstance(root, ndarray):  # a view of a device array
                return
        _track(root)
        if _COUNTERS:
            _count(root.nbytes)

    def __getitem__(self, key):
        out = super().__getitem__(key)
        if isinstance(out, np.ndarray):
            return out
        # CuPy: an element is a 0-d device array viewing it, never a host scalar
        return super().__getitem__((key if isinstance(key, tuple) else (key,)) + (Ellipsis,))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # CuPy: arithmetic and reductions give device arrays (0-d ones for a whole reduction), and a NumPy array
        # among the operands is refused (it is host memory)
        for operand in inputs + tuple(kwargs.get("out", ())):
            if isinstance(operand, np.ndarray) and not isinstance(operand, ndarray):
                raise TypeError(f"Unsupported type {type(operand)}")
        plain = tuple(a.view(np.ndarray) if isinstance(a, ndarray) else a for a in inputs)
        if "out" in kwargs:
            kwargs["out"] = tuple(a.view(np.ndarray) if isinstance(a, ndarray) else a for a in kwargs["out"])
        out = getattr(ufunc, method)(*plain, **kwargs)
        return _on_device(out)

    def argmax(self, axis=None, out=None, *, keepdims=False):
        return _on_device(self.view(np.ndarray).argmax(axis=axis, keepdims=keepdims))

    def argmin(self, axis=None, out=None, *, keepdims=False):
        return _on_device(self.view(np.ndarray).argmin(axis=axis, keepdims=keepdims))

    def item(self):  # CuPy's takes no index
        return self.view(np.ndarray).item()

    def get(self, stream=None, order="C", out=None, blocking=True):
        if stream is not None and not isinstance(stream, _Stream):
            raise AttributeError(f"'{type(stream).__name__}' object has no attribute 'ptr'")
        return np.array(self, copy=True, order=order).view(np.ndarray)

    def set(self, array):
        self[...] = np.asarray(array)

    @property
    def data(self) -> "MemoryPointer":
        """``x.data``: the device pointer of element 0 (``x.data.ptr``, an int); a kernel argument that is such a
        pointer, or an int inside an array's memory, points into that array (:func:`marshalled`)."""
        root, offset = allocation_of(self)
        address = root.__array_interface__["data"][0]
        _POINTED[address] = (weakref.ref(root), root.nbytes)
        return MemoryPointer(address + offset)

    @property
    def device(self) -> "_Device":
        return _Device(0)


def _on_device(out):
    """A NumPy result as CuPy's: arrays (and scalars, as 0-d arrays) on the device."""
    if isinstance(out, tuple):
        return tuple(_on_device(o) for o in out)
    if isinstance(out, ndarray):
        return out
    if isinstance(out, np.ndarray):
        return out.view(ndarray)
    if isinstance(out, np.generic):
        return np.asarray(out).view(ndarray)
    return out


class MemoryPointer:
    """``cupy.cuda.MemoryPointer``: a device address (``ptr``); adding an int moves it, as CuPy's does."""

    def __init__(self, ptr: int):
        self.ptr = int(ptr)

    def __add__(self, offset: int) -> "MemoryPointer":
        return MemoryPointer(self.ptr + int(offset))

    __radd__ = __add__

    def __sub__(self, offset: int) -> "MemoryPointer":
        return MemoryPointer(self.ptr - int(offset))

    def __int__(self) -> int:
        return self.ptr


#: Device allocations whose address was read (``x.data``): address -> (the array owning it, its bytes).
_POINTED: dict[int, tuple] = {}


def _pointed(address: int):
    """The memory ``address`` points into, as a byte view of the array holding it (None if no array does)."""
    for start, (ref, size) in list(_POINTED.items()):
        root = ref()
        if root is None:
            del _POINTED[start]
        elif start <= address <= start + size:
            return root.reshape(-1, order="A").view(np.uint8)[address - start:]
    return None


def _python_scalar(value):
    """A Python scalar as CuPy 14 stores it for a kernel (``cupy/_core/_scalar.pyx``, ``numpy_dtype_from_pyscalar``):
    a ``bool`` as a bool, an ``int`` as an int64 (a uint64 from 2**63; OverflowError past either), a ``float`` as a
    float64, a ``complex`` as a complex128; None for anything else."""
    kind = type(value)
    if kind is bool:
        return np.bool_(value)
    if kind is int:
        if value >= 2**63:
            return np.array(value, dtype=np.uint64)[()]  # OverflowError from 2**64, as NumPy's packing
        return np.array(value, dtype=np.int64)[()]
    if kind is float:
        return np.float64(value)
    if kind is complex:
        return np.complex128(value)
    return None


def marshalled(arg):
    """What CuPy passes to a kernel for ``arg``, as CuPy 14 does (``cupy/cuda/function.pyx``, ``_pointer``, and
    ``cupy/_core/_scalar.pyx``, ``CScalar``; measured: ``tests/golden/cupy``): a device array as its pointer; a
    NumPy scalar, or a NumPy array of one element, as that element's own bytes; a Python scalar as
    :func:`_python_scalar` stores it; anything else (a larger host array, a list, a string) is refused.
    The driver reads as many bytes as the parameter has (past the value the storage holds zeros), so a ``float``
    for a ``float`` parameter reads the low half of a double: garbage, as on a GPU.  A pointer
    (``MemoryPointer``, or an 8-byte integer inside an array whose ``data`` was read) points into that array."""
    if isinstance(arg, ndarray):
        return arg.view(np.ndarray)
    if isinstance(arg, MemoryPointer):
        arg = np.int64(arg.ptr)
    elif isinstance(arg, np.ndarray) and arg.size == 1:  # a host array of one element: that element (measured)
        arg = arg.reshape(-1)[0]
    elif not isinstance(arg, np.generic):
        scalar = _python_scalar(arg)
        if scalar is None:
            raise TypeError(f"Unsupported type {type(arg)}")
        arg = scalar
    if arg.dtype.kind in "iu" and arg.itemsize == 8:
        pointed = _pointed(int(arg))
        if pointed is not None:
            return pointed
    return arg.tobytes()


def _device(array) -> ndarray:
    return np.array(array, copy=True).view(ndarray)


def asarray(a, dtype=None, order=None):
    if isinstance(a, ndarray) and (dtype is None or a.dtype == np.dtype(dtype)):
        return a
    return _device(np.asarray(a, dtype=dtype, order=order))


def ascontiguousarray(a, dtype=None):
    # CuPy returns the input itself when it is already C-contiguous and of that dtype (no copy, no allocation)
    if isinstance(a, ndarray) and a.ndim >= 1 and a.flags.c_contiguous and (dtype is None
                                                                           or a.dtype == np.dtype(dtype)):
        return a
    return _device(np.ascontiguousarray(a, dtype=dtype))


def array(obj, dtype=None, copy=True, order="K", subok=False, ndmin=0):
    if copy is False and isinstance(obj, ndarray) and (dtype is None or obj.dtype == np.dtype(dtype)):
        return obj
    return _device(np.array(obj, dtype=dtype, order=order, ndmin=ndmin))


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
                "max_threads_per_block": _device_profile[1]["MaxThreadsPerBlock"]}

    def __call__(self, grid, block, args, *, shared_mem: int = 0, stream=None, enable_cooperative_groups=False):
        grid, block = _launch_shape("grid", grid), _launch_shape("block", block)
        values = [marshalled(a) for a in args]
        if self._ptx is None:
            self._ptx = _ptx_of(self.code, self.options, _device_profile[0])
        _check_launch(self, grid, block, shared_mem)
        try:
            result = launch(self._ptx, self.name, grid, block, values, shared_mem)
        except ValueError as error:
            if not str(error).startswith("no kernel"):
                raise
            raise CUDADriverError(f"CUDA_ERROR_NOT_FOUND: named symbol not found\nВ исходнике нет ядра "
                                  f"{self.name!r} с extern \"C\" (иначе имя искажено C++): проверьте имя в "
                                  "RawKernel(код, имя) и extern \"C\" перед __global__.") from None
        LAUNCHES.append((self.name, result))
        fatal = [f for f in result.findings if f.kind in FATAL]
        if fatal:
            __tracebackhide__ = True  # IPython: the student's cell is the frame to show, not the stand-in's
            raise EmulatedFault(fault_message(self.name, fatal[0], result.findings))


def _launch_shape(what: str, shape) -> tuple:
    """``grid``/``block`` as CuPy takes them: a tuple of 1-3 ints, each below 1 counted as 1 (CuPy's
    ``max(1, ...)``: a grid of 0 blocks runs one)."""
    if type(shape) is not tuple:
        raise TypeError(f"Argument '{what}' has incorrect type (expected tuple, got {type(shape).__name__})")
    shape = (shape + (1, 1))[:3]
    return tuple(max(1, int(v)) for v in shape)


#: The limits of a launch (the CUDA C++ Programming Guide, "Technical Specifications per Compute Capability": the
#: same from sm_75 to sm_90): threads of a block along x, y, z and in all; blocks of a grid along x, y, z.
MAX_BLOCK, MAX_BLOCK_THREADS, MAX_GRID = (1024, 1024, 64), 1024, (2**31 - 1, 65535, 65535)


def _check_launch(kernel: "RawKernel", grid: tuple, block: tuple, shared_mem: int) -> None:
    """Refuse what the driver refuses, with CuPy's error (``CUDA_ERROR_INVALID_VALUE``) and which limit it was."""
    threads = block[0] * block[1] * block[2]
    if threads > MAX_BLOCK_THREADS or any(b > m for b, m in zip(block, MAX_BLOCK)):
        raise CUDADriverError(f"{INVALID_VALUE}\nБлок {block[0]}×{block[1]}×{block[2]} = {threads} потоков: "
                              f"в блоке не больше {MAX_BLOCK_THREADS} потоков (и не больше 64 по z). Уменьшите "
                              "блок и увеличьте сетку (grid).")
    if any(g > m for g, m in zip(grid, MAX_GRID)):
        raise CUDADriverError(f"{INVALID_VALUE}\nСетка {grid[0]}×{grid[1]}×{grid[2]} блоков: по y и z не больше "
                              "65535 блоков, по x не больше 2³¹−1. Переложите большое измерение на x.")
    optin = _device_profile[1]["MaxSharedMemoryPerBlockOptin"]
    if kernel.max_dynamic_shared_size_bytes > optin:
        raise CUDADriverError(f"{INVALID_VALUE}\nmax_dynamic_shared_size_bytes = "
                              f"{kernel.max_dynamic_shared_size_bytes} Б: на этом GPU блоку доступно не больше "
                              f"{optin} Б разделяемой памяти. Уменьшите тайлы.")
    limit = max(_device_profile[1]["MaxSharedMemoryPerBlock"], kernel.max_dynamic_shared_size_bytes)
    if shared_mem > limit:
        raise CUDADriverError(f"{INVALID_VALUE}\nshared_mem = {shared_mem} Б больше допустимого ({limit} Б): "
                              "больше 48 КиБ — только после kernel.max_dynamic_shared_size_bytes = ... (и не "
                              f"больше {optin} Б на этом GPU).")


class RawModule:
    """``cupy.RawModule(code=...)``: its kernels by name (``get_function``), each a :class:`RawKernel` of the
    module's source."""

    def __init__(self, code: str | None = None, path=None, options=(), backend: str = "nvrtc",
                 translate_cucomplex: bool = False, *, enable_cooperative_groups: bool = False,
                 name_expressions=None, jitify: bool = False):
        if code is None or name_expressions:
            raise NotEmulated("RawModule(path=...) и name_expressions (шаблоны C++)")
        self.code, self.options = code, tuple(options)

    def get_function(self, name: str) -> "RawKernel":
        return RawKernel(self.code, name, self.options)


class NotEmulated(ExplainedError):
    """What the stand-in cannot emulate: the grader's limitation, never the student's mistake (``call_student``
    reports the check as not gradable here: a grader fault, never a 0)."""

    grader_limitation = True

    def __init__(self, what: str, instead: str = "Запустите эту ячейку на GPU (Colab) или обойдитесь без этого."):
        super().__init__(f"эмулятор GPU не поддерживает {what}: это ограничение проверки без GPU, не ошибка в "
                         f"вашем коде. {instead}")


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
    raise NotEmulated("cupy.cuda.get_elapsed_time (время на эмуляторе GPU не измеряется)",
                      "Эмулятор проверяет, что ядро считает верно, но не моделирует его скорость: замерьте время "
                      "на GPU (Colab) или посмотрите числа H200 в тексте урока.")


class _Stream:
    """``cupy.cuda.Stream``: the emulator runs each launch to its end, so every stream is always done."""

    ptr = 0

    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False):
        pass

    def synchronize(self):
        pass

    def use(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @property
    def done(self) -> bool:
        return True


_Stream.null = _Stream()


class _MemoryPool:
    """``cupy.get_default_memory_pool()``: the bytes of the live device arrays, each rounded up to CuPy's
    allocation unit (512 bytes).  The stand-in keeps no freed blocks: ``total_bytes`` is ``used_bytes`` and there is
    nothing to free."""

    UNIT = 512

    def __init__(self) -> None:
        self._limit = 0

    def used_bytes(self) -> int:
        return sum(-(-size // self.UNIT) * self.UNIT for size in list(_LIVE.values()))

    def total_bytes(self) -> int:
        return self.used_bytes()

    def free_bytes(self) -> int:
        return 0

    def n_free_blocks(self) -> int:
        return 0

    def free_all_blocks(self, stream=None):
        pass

    def set_limit(self, size=None, fraction=None):
        self._limit = int(size or 0)

    def get_limit(self) -> int:
        return self._limit


_POOL = _MemoryPool()


def get_default_memory_pool() -> _MemoryPool:
    return _POOL


def get_array_module(*args):
    """``cupy.get_array_module``: this module when an argument is a device array, else NumPy."""
    return sys.modules[__name__] if any(isinstance(a, ndarray) for a in args) else np


cuda = types.SimpleNamespace(
    Device=_Device,
    Stream=_Stream,
    Event=_Event,
    MemoryPointer=MemoryPointer,
    get_current_stream=lambda device=None: _Stream.null,
    get_elapsed_time=_elapsed_time,
    runtime=types.SimpleNamespace(getDeviceCount=lambda: 1, deviceSynchronize=lambda: None,
                                  getDeviceProperties=lambda device=0: dict(_device_profile[2])),
    driver=types.SimpleNamespace(CUDADriverError=CUDADriverError),
)

#: ``cupy.random``'s generator: the numbers differ from CuPy's, but ``seed`` makes them repeat.
_RNG = [np.random.default_rng()]


def _random_array(make):
    def on_device(size=None, dtype=np.float64):
        return np.asarray(make(_RNG[0], size), dtype=dtype).view(ndarray)
    return on_device


def _seed(seed=None) -> None:
    _RNG[0] = np.random.default_rng(seed)


#: ``cupy.random``: the functions a wrapper or a demo cell uses to make inputs (other numbers than CuPy's).
random = types.SimpleNamespace(
    seed=_seed,
    standard_normal=_random_array(lambda rng, size: rng.standard_normal(size)),
    random=_random_array(lambda rng, size: rng.random(size)),
    rand=lambda *shape, dtype=np.float64: np.asarray(_RNG[0].random(shape), dtype).view(ndarray),
    randn=lambda *shape, dtype=np.float64: np.asarray(_RNG[0].standard_normal(shape), dtype).view(ndarray),
)

float16, float32, float64 = np.float16, np.float32, np.float64
int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64
bool_ = np.bool_
complex64, complex128 = np.complex64, np.complex128
#: CuPy's constants (NumPy's values).
inf, nan, pi, e, euler_gamma, newaxis = np.inf, np.nan, np.pi, np.e, np.euler_gamma, None
__version__ = "emulated"


def reset() -> None:
    LAUNCHES.clear()


def findings() -> list:
    """Every finding of every launch since :func:`reset`."""
    return [f for _, result in LAUNCHES for f in result.findings]


#: NumPy functions that answer a Python bool where CuPy's answer a 0-d device array.
_BOOL_AS_ARRAY = {"allclose", "array_equal", "array_equiv"}


def _on_device_function(fn):
    as_array = getattr(fn, "__name__", "") in _BOOL_AS_ARRAY

    def on_device(*args, **kwargs):
        out = fn(*args, **kwargs)
        if as_array and isinstance(out, (bool, np.bool_)):
            return np.asarray(out).view(ndarray)
        return _on_device(out)
    on_device.__name__ = getattr(fn, "__name__", "function")
    return on_device


#: ``cupy.linalg``: the functions of NumPy's, on device arrays.
linalg = types.SimpleNamespace(**{name: _on_device_function(getattr(np.linalg, name))
                                  for name in ("norm", "inv", "solve", "det", "eigh", "qr", "svd", "cholesky")})


def __getattr__(name: str):
    value = getattr(np, name, None)
    if isinstance(value, type):  # a dtype or a class (finfo, iinfo, dtype): CuPy's are NumPy's
        return value
    if callable(value):  # the array API (sqrt, exp, where, concatenate ...): results on the device, as CuPy's
        return _on_device_function(value)
    raise AttributeError(f"эмулятор GPU не поддерживает cupy.{name}: это ограничение проверки без GPU, не ошибка в "
                         "вашем коде. Запустите эту ячейку на GPU (Colab) или обойдитесь без этого.")


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
for _class in (ndarray, RawKernel, RawModule, MemoryPointer, _Device, _Event, _Stream):
    _class.__module__ = "cupy"

#: Said under every verdict of a check that ran on the emulator.
EMULATED = "проверено на эмуляторе GPU"

#: What to do about each kind of finding (the findings themselves say where).
ADVICE = {
    "race": "между записью в __shared__ одними потоками и чтением другими (после загрузки тайла, после записи "
            "частичных сумм) или перед перезаписью тайла нужен __syncthreads()",
    "warp_race": "между записью в __shared__ и чтением потоками того же варпа нужен __syncwarp() (в "
                 "варп-синхронной редукции — после каждого шага); __shfl_xor_sync / __shfl_down_sync обмениваются "
                 "регистрами и порядок доступов к памяти не задают, а «варп идёт в ногу» язык не обещает",
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
CAUSES = ("uninitialized_shared", "race", "warp_race", "cp_async_pending")


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


def findings_message(found: list, *, then_failed: str | None = None) -> str:
    """The failure for a check whose launches had findings: the first of each kind, where, and what to do.

    ``then_failed``: the check's own failure (a wrong value, a NaN, a count) when it also failed.  The findings come
    first: they name the defect, where the check's failure and its generic hint («число блоков округлено вниз»)
    only name a symptom of it."""
    first = {}
    for finding in found:
        first.setdefault(finding.kind, finding)
    if "race" in first:  # the __syncthreads() a race across warps needs orders the warp's accesses too
        first.pop("warp_race", None)
    if then_failed is None:
        lines = [f"Эмулятор GPU нашёл в ядре ошибки, которые на GPU могли не изменить ответ ({len(found)} шт.):"]
    else:
        lines = [f"Эмулятор GPU нашёл в ядре ошибки ({len(found)} шт.) — начните с них, неверный результат ниже, "
                 "скорее всего, их следствие:"]
    for kind, finding in first.items():
        lines.append(f"- {finding}" + (f"\n  Что сделать: {ADVICE[kind]}." if kind in ADVICE else ""))
    if then_failed is None:
        lines.append("Совпадение с эталоном при этом ничего не доказывает: на эмуляторе потоки идут в другом "
                     "порядке, чем на GPU, и гонка или чтение мусора могут не проявиться в числах ни там, ни там.")
    else:
        lines.append(f"Что при этом увидела проверка: {then_failed}")
    return "\n".join(lines)
