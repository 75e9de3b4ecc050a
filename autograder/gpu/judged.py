"""A GPU check judged apart from the student's code: the judge's side of :mod:`autograder.gpu.runtime`.

Every check's worker is a judge (:mod:`autograder.checks.student_process`): the student's code runs in a child
process, the judge computes the inputs and the expected values and compares.  For a GPU check everything that
touches the device — CuPy or the emulator's stand-in for it, the student's wrapper, its kernels, CUDA itself — is
in that child too; this process never initialises CUDA (it forked the child, and a CUDA context does not survive
a fork).  What the judge holds instead:

* :class:`Input`: a host array the check put "on the device" (``runtime.device``); its bytes travel to the student
  process once, with the first call that uses it, and become a device array there (guarded as on the GPU path);
* :class:`DeviceResult`: what the student process says of a device array the student's function returned (its
  key, type, shape, dtype); :func:`fetched` brings its values back as a plain ndarray, and the judge checks that
  array itself (its shape, dtype, values), never the record's word for it;
* :class:`Allocations`: the device allocations the student process counted during the calls inside the block.

:func:`remote` runs one of ``runtime``'s functions there on such names; this module knows nothing of ``runtime``
(which calls it), only of the student process.

What the student process measures for the judge — device allocations, kernel times, the emulator's findings — it
reports; native code in that process could misreport them (docs/developer.md, "Who can write a verdict").  Values
are compared here.  Whether that process has a GPU or the emulator's stand-in it said before any student code
existed there (``student_process.prepared``: what ``runtime.prepare_gpu_check`` found): the judge believes only that.
"""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from ..checks.failures import CheckFailed, GraderFault
from ..checks.student_process import in_student, transferable
from .allocations import AllocationSizes

_KEYS = itertools.count(1)


class Input:
    """The judge's device array: a host array that the student process holds on the device under ``key``."""

    __slots__ = ("key", "host", "sent")

    def __init__(self, host: np.ndarray):
        self.key, self.host, self.sent = next(_KEYS), np.ascontiguousarray(host), False

    @property
    def shape(self) -> tuple:
        return self.host.shape

    @property
    def dtype(self) -> np.dtype:
        return self.host.dtype

    def get(self) -> np.ndarray:
        """The array as the student process's device holds it now (the student's kernel may have written it)."""
        return fetched(self) if self.sent else self.host.copy()

    def __getstate__(self):  # judge -> student process: the bytes with the first call only
        state = (self.key, None if self.sent else self.host)
        self.sent = True
        return state

    def __setstate__(self, state):
        self.key, self.host = state
        self.sent = True


@transferable
@dataclasses.dataclass(frozen=True)
class DeviceResult:
    """A device array the student's function returned, as the student process describes it: a claim, which
    :func:`fetched` replaces by the array's values."""

    key: int
    type_name: str
    shape: tuple
    dtype: str

    def get(self) -> np.ndarray:
        return fetched(self)


class Allocations(AllocationSizes):
    """``runtime.DeviceAllocations`` in a judge: the sizes the student process counted for the calls of
    ``runtime.run_student`` inside the block (it counts them as the GPU path or the stand-in does)."""

    _open: list = []

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def __enter__(self):
        Allocations._open.append(self)
        return self

    def __exit__(self, *exc):
        Allocations._open.remove(self)
        return False


# --- the judge's calls ---------------------------------------------------------------------------

def remote(runner, make_device, *args, **kwargs):
    """``runner(*args, **kwargs)`` in the student process (a module-level grader function, ``runtime``'s): the
    judge's names of device arrays there replaced by the arrays (an :class:`Input` made by ``make_device``, the
    first time, from its bytes), each device array of the answer kept there and described as a
    :class:`DeviceResult`."""
    return in_student(_here, runner, make_device, args, kwargs)


def counting() -> bool:
    """Whether an :class:`Allocations` block is open: the student process is to count allocations."""
    return bool(Allocations._open)


def add_sizes(sizes) -> None:
    """The allocation sizes the student process counted, added to every open :class:`Allocations` block."""
    if type(sizes) is not list or not all(type(s) is int for s in sizes):
        raise CheckFailed("Процесс с вашим кодом прислал не размеры выделений.")
    for block in Allocations._open:
        block.sizes.extend(sizes)


def fetched(array) -> np.ndarray:
    """The values of a device array of the student process (:class:`Input` or :class:`DeviceResult`) as a plain
    ndarray, checked to be one."""
    host = in_student(_fetch_here, array.key)
    if type(host) is not np.ndarray:
        raise CheckFailed("Процесс с вашим кодом прислал вместо массива не массив.")
    return host


def host_copy(got) -> np.ndarray | None:
    """The host copy of ``got`` when it is a device array of the student process, else None."""
    return fetched(got) if type(got) is DeviceResult else None


def status() -> tuple[bool, str, bool]:
    """(a GPU is used, the description or why not, the stand-in is in place): what the student process found when it
    was prepared, before any student code existed there (``runtime.prepare_gpu_check``)."""
    from ..checks import student_process

    facts = student_process.prepared()
    if not (type(facts) is tuple and len(facts) == 3 and type(facts[0]) is bool and type(facts[1]) is str
            and type(facts[2]) is bool):
        raise GraderFault("процесс для кода студента не сообщил, есть ли в нём GPU (проверка без "
                          "runtime.prepare_gpu_check в before_payload?)")
    return facts


def findings() -> list:
    """The emulator's findings of the student process's launches since :func:`reset_findings`, rebuilt here."""
    from .emulator.findings import Finding

    rows = in_student(_findings_here)
    found = []
    for row in rows if type(rows) is list else ():
        if type(row) is dict and all(type(key) is str for key in row):
            try:
                found.append(Finding(**row))
            except TypeError:
                continue
    return found


def reset_findings() -> None:
    in_student(_reset_here)


# --- in the student process --------------------------------------------------------------------

#: Student process: the device arrays the judge names, by key (its inputs, the results it was told of).
_DEVICE: dict[int, object] = {}
_RESULT_KEYS = itertools.count(1 << 40)


def _device_type():
    """Student process: the device array type of its ``cupy`` (CuPy, or the emulator's stand-in in its place)."""
    import sys

    cupy = sys.modules.get("cupy")
    return getattr(cupy, "ndarray", None)


def _resolved(value, make_device):
    """Student process: the judge's names of device arrays replaced by the arrays."""
    kind = type(value)
    if kind is Input:
        if value.key not in _DEVICE:
            _DEVICE[value.key] = make_device(value.host)
        return _DEVICE[value.key]
    if kind is DeviceResult:
        return _DEVICE[value.key]
    if kind in (tuple, list):
        return kind(_resolved(v, make_device) for v in value)
    if kind is dict:
        return {k: _resolved(v, make_device) for k, v in value.items()}
    return value


def _described(value):
    """Student process: each device array of an answer kept here and described for the judge."""
    device_type = _device_type()
    if device_type is not None and type(value) is device_type:
        key = next(_RESULT_KEYS)
        _DEVICE[key] = value
        return DeviceResult(key, type(value).__name__, tuple(int(n) for n in value.shape), str(value.dtype))
    if type(value) in (tuple, list):
        return type(value)(_described(v) for v in value)
    return value


def _here(runner, make_device, args, kwargs):
    return _described(runner(*_resolved(args, make_device), **_resolved(kwargs, make_device)))


def _fetch_here(key):
    return np.array(_DEVICE[key].get(), copy=True).view(np.ndarray)


def _findings_here():
    from . import emulated_cupy

    return [dataclasses.asdict(f) for f in emulated_cupy.findings()]


def _reset_here():
    from . import emulated_cupy

    emulated_cupy.reset()
