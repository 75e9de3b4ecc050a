"""The student process: a CPU check's student code runs in a child of the check's worker, never in the worker.

The worker (the *judge*) writes the verdict and signs it with a nonce it reads from its standard input only
after this child was forked: no memory, descriptor or file the student's code can reach holds what signs a
verdict.  The child unpickles the student's objects and runs them; the judge holds *handles* to them
(:class:`StudentObject`), computes every input and every expected value, and compares.  Each call travels
over a socket pair:

* judge -> student: ``(target, args, kwargs, errstate)`` pickled by the judge; ``target`` is a handle or a
  grader function (pickled by reference: the child is a fork, it has the same modules), handles in the
  arguments become the objects they stand for;
* student -> judge: ``("ok", value, copies)`` (``copies``: the array arguments as the call left them, so a
  check sees what the student's code did to its inputs), ``("failed", message, mistake, not_started)``
  (a :class:`CheckFailed` raised in the child) or ``("raised", name, text, where, builtin)`` (a student's
  exception from a plain call of a handle).  Read with :class:`_FromStudent`: nothing but plain data —
  exact builtins, plain ndarrays, numpy scalars and dtypes, the grader's :func:`transferable` records — and
  handles; whatever else the student's code returns stays in the child and comes back as a handle.

Before that the child sends one frame the judge may believe: ``("prepared", error, facts)``, what the check's
``before_payload`` and the worker's set-up gave (a GPU check: is there a GPU or the emulator's stand-in), written
before any student code exists in the child; it unpickles the student's objects only after the judge's ``go``.

The child can lie about anything it sends later; it cannot make the judge believe more than data.  What the
judge measures itself (the child's resident memory, :func:`resident_peak`) it does not take from the child.
A GPU check too: the device and everything on it is the student process's, the judge holds names of device
arrays (:mod:`autograder.gpu.judged`); what that process measures for the judge (device allocations, kernel times,
the emulator's findings) it reports (docs/developer.md, "Who can write a verdict").
"""
from __future__ import annotations

import builtins
import contextlib
import io
import os
import pickle
import socket
import struct
import sys

import numpy as np

_LENGTH = struct.Struct("<Q")

#: The judge's side of the socket pair while this process is a judge (None: student code runs here, if any).
_JUDGE: dict = {"socket": None, "pid": None, "classes": {}, "payloads": {}, "prepared": None}


# --- frames on the socket ----------------------------------------------------------------------

def _send(sock: socket.socket, data: bytes) -> None:
    sock.sendall(_LENGTH.pack(len(data)) + data)


def _receive(sock: socket.socket) -> bytes | None:
    head = _exactly(sock, _LENGTH.size)
    if head is None:
        return None
    return _exactly(sock, _LENGTH.unpack(head)[0])


def _exactly(sock: socket.socket, count: int) -> bytes | None:
    chunks, left = [], count
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --- what may come back ------------------------------------------------------------------------

class StudentObject:
    """The judge's handle to an object that lives in the student process: calling it calls the object there.

    Its class is named after the student's type (``type(handle).__name__`` reads as the student's object
    would), and it has no other attribute: a check reads data, never a student's object."""

    __slots__ = ("_id", "_callable")

    def __init__(self, handle_id: int, is_callable: bool):
        self._id, self._callable = handle_id, is_callable

    def __call__(self, *args, **kwargs):
        if not self._callable:
            raise TypeError(f"'{type(self).__name__}' object is not callable")
        return _remote(_plain_call, (self, *args), kwargs)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    def __reduce__(self):  # never pickled by value: _ToStudent sends its id
        raise TypeError("a handle travels only to the student process")


def is_handle(obj) -> bool:
    return isinstance(obj, StudentObject)


def callable_handle(obj) -> bool:
    return isinstance(obj, StudentObject) and obj._callable


_TRANSFERABLE: set[type] = set()


def transferable(cls: type) -> type:
    """Class decorator: the grader's record (a dataclass of plain fields) may come back from the student process."""
    _TRANSFERABLE.add(cls)
    return cls


def _scalar_types() -> frozenset:
    """NumPy's scalar types and ml_dtypes' (FP8, bfloat16: lesson 10's arrays)."""
    import ml_dtypes

    found = {t for t in set(np.sctypeDict.values()) if isinstance(t, type)}
    found |= {v for v in vars(ml_dtypes).values() if isinstance(v, type) and issubclass(v, np.generic)}
    return frozenset(found)


_SCALARS = _scalar_types()


def _allowed_globals() -> dict[tuple[str, str], object]:
    from numpy._core import multiarray, numeric

    objects = [np.ndarray, np.dtype, multiarray._reconstruct, multiarray.scalar, numeric._frombuffer,
               complex, set, frozenset, bytearray, slice, range, *_SCALARS]
    objects += [v for v in vars(np.dtypes).values() if isinstance(v, type) and issubclass(v, np.dtype)]
    return {(obj.__module__, obj.__qualname__): obj for obj in objects}


_GLOBALS = _allowed_globals()
_GLOBAL_IDS = frozenset(id(obj) for obj in _GLOBALS.values())
_PLAIN = frozenset({int, float, bool, str, bytes, type(None), tuple, list, dict, complex, set, frozenset,
                    bytearray, slice, range, np.ndarray, pickle.PickleBuffer})


def _plain(obj) -> bool:
    """Data the judge may hold: exact builtins, plain arrays, library scalars and dtypes, the grader's records."""
    kind = type(obj)
    if kind in _PLAIN or kind in _SCALARS or kind in _TRANSFERABLE or id(obj) in _GLOBAL_IDS:
        return True
    if kind is type and obj in _TRANSFERABLE:  # the record's class, named in the pickle
        return True
    return isinstance(obj, np.dtype) and kind.__module__.split(".")[0] == "numpy"  # not subclassable in Python


class _Back(pickle.Pickler):
    """Child: plain data by value, every other object as a handle (it stays in :data:`_TABLE`)."""

    def persistent_id(self, obj):
        if _plain(obj):
            return None
        kind = type(obj)
        _TABLE.append(obj)
        name = getattr(kind, "__name__", "?")
        return ("h", len(_TABLE) - 1, name if type(name) is str else "?", callable(obj))


class _FromStudent(pickle.Unpickler):
    """Judge: only the globals plain data needs, the grader's records, and handles."""

    def find_class(self, module: str, name: str):
        obj = _GLOBALS.get((module, name))
        if obj is None:
            for cls in _TRANSFERABLE:
                if (cls.__module__, cls.__qualname__) == (module, name):
                    return cls
            raise pickle.UnpicklingError(f"{module}.{name} не данные")
        return obj

    def persistent_load(self, pid):
        if not (type(pid) is tuple and len(pid) == 4 and pid[0] == "h" and type(pid[1]) is int
                and type(pid[2]) is str and type(pid[3]) is bool):
            raise pickle.UnpicklingError("неверная ссылка на объект")
        return _handle_class(pid[2][:80])(pid[1], pid[3])


def _handle_class(name: str) -> type:
    classes = _JUDGE["classes"]
    if name not in classes:
        classes[name] = type(name if name.isidentifier() else "object", (StudentObject,), {"__slots__": ()})
    return classes[name]


class _ToStudent(pickle.Pickler):
    """Judge: the call by value, handles by their ids."""

    def persistent_id(self, obj):
        return ("h", obj._id) if isinstance(obj, StudentObject) else None


class _FromJudge(pickle.Unpickler):
    def persistent_load(self, pid):
        return _TABLE[pid[1]]


#: Child: the objects behind the judge's handles, by index.
_TABLE: list = []


def _dumps(pickler: type, obj) -> bytes:
    buffer = io.BytesIO()
    pickler(buffer, protocol=5).dump(obj)
    return buffer.getvalue()


# --- the judge -------------------------------------------------------------------------------------

def judging() -> bool:
    """Whether this process is a judge: student code runs in its student process, never here."""
    return _JUDGE["socket"] is not None


def start(payloads: list[bytes], close: tuple[int, ...], prepare=None, set_up=None) -> None:
    """Fork the student process, before the worker sets itself up.  In the child, never returns: it calls
    ``prepare`` (the check's ``before_payload``: a GPU check's ``cupy``, real or the emulator's stand-in, and CUDA
    are set up there and only there) and ``set_up`` (the worker's limits and guard, as the worker sets them on
    itself), says whether that went well, waits for :func:`go`, unpickles the payloads and serves calls.
    ``close``: the descriptors the child must not have (the judge's standard input, which still holds the nonce,
    and its reply file)."""
    judge_end, student_end = socket.socketpair()
    judge = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            judge_end.close()
            for fd in close:
                os.close(fd)
            null = os.open(os.devnull, os.O_RDONLY)  # a standard input, as a fresh process has one
            if null != 0:
                os.dup2(null, 0)
                os.close(null)
            _child(student_end, payloads, judge, prepare, set_up)
        finally:
            os._exit(70)
    student_end.close()
    _JUDGE.update(socket=judge_end, pid=pid, sent=list(payloads))


def go() -> None:
    """Judge: let the student process unpickle the student's objects (the worker has said that student code may
    run from now on)."""
    try:
        _send(_JUDGE["socket"], _GO)
    except OSError:
        pass  # gone: objects() says so


def objects() -> list:
    """Judge: handles to the student's objects (CheckFailed when the child could not unpickle them; GraderFault when
    its preparation failed, which it says before any student code exists there)."""
    from .failures import CheckFailed, GraderFault

    prepared = _FromStudent(io.BytesIO(_receive_or_gone())).load()
    if not (type(prepared) is tuple and len(prepared) == 3 and prepared[0] == "prepared"):
        raise CheckFailed("Процесс с вашим кодом нарушил порядок обмена с проверкой.")
    if type(prepared[1]) is str:
        raise GraderFault(f"процесс для вашего кода не подготовлен: {prepared[1]}")
    _JUDGE["prepared"] = prepared[2]
    found = _answer(_receive_or_gone())
    if type(found) is not list or len(found) != len(_JUDGE["sent"]):
        raise CheckFailed("Процесс с вашим кодом вернул не те объекты.")
    _JUDGE["payloads"] = {id(obj): blob for obj, blob in zip(found, _JUDGE["sent"]) if is_handle(obj)}
    return found


def prepared():
    """Judge: what the check's ``before_payload`` returned in the student process (a GPU check: whether that process
    has a GPU or the emulator's stand-in).  Sent before any student code existed there, so it is the grader's word;
    None where it returned nothing that is data."""
    return _JUDGE["prepared"]


def payload_of(handle) -> bytes:
    """Judge: the bytes a student's object came in, as the grader sent them (a check that hands the object to a
    worker of its own: compute-sanitizer's run, the emulator's)."""
    from .failures import CheckFailed

    blob = _JUDGE["payloads"].get(id(handle))
    if blob is None:
        raise CheckFailed("объект для проверки — не тот, что прислан на проверку.")
    return blob


def in_student(runner, *args, **kwargs):
    """``runner(*args, **kwargs)`` where the student's objects are: in the student process when this is a judge
    (``runner`` a module-level grader function; its result comes back as data), here otherwise."""
    if judging():
        return _remote(runner, args, kwargs)
    return runner(*args, **kwargs)


def verify() -> str | None:
    """Judge: what the student process's guard found changed since the last call (None: nothing)."""
    from ..isolation import guard

    found = _remote(guard.verify, (), {})
    return found if type(found) is str or found is None else "ответ проверки подменён"


def stop() -> None:
    """Judge: the student process killed and reaped, before the verdict is written."""
    import signal

    pid = _JUDGE["pid"]
    if pid is None:
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    _JUDGE.update(pid=None)


def measured(runner, *args, **kwargs) -> tuple[object, int | None]:
    """``in_student(runner, ...)`` and how much the student process's resident memory grew during the call, in
    bytes, read by the judge from the kernel's counters (``/proc/<pid>/status``; the peak is reset through
    ``clear_refs`` once the arguments are in the child): memory no allocator reports — ``mmap``, a C library —
    counts there too.  None where this process does not judge or the counters cannot be read."""
    if not judging():
        return runner(*args, **kwargs), None
    growth = {}
    return _remote(runner, args, kwargs, growth), growth.get("bytes")


_READY, _DONE, _GO = b"ready", b"done", b"go"


def _remote(target, args: tuple, kwargs: dict, growth: dict | None = None):
    sock = _JUDGE["socket"]
    data = _dumps(_ToStudent, (target, args, kwargs, np.geterr(), growth is not None))
    try:
        _send(sock, data)
        if growth is not None:
            _expect(_READY)
            pid = _JUDGE["pid"]
            base, libraries = _reset_peak(pid), _library_pages(pid)
            _send(sock, _GO)
            _expect(_DONE)
            peak, loaded = _memory_field(pid, "VmHWM"), _library_pages(pid)
            if None not in (base, peak, libraries, loaded):
                growth["bytes"] = max(0, peak - base - max(0, loaded - libraries))
            _send(sock, _GO)
    except OSError:
        pass  # gone: the answer below says so
    return _answer(_receive_or_gone(), args, kwargs)


def _expect(frame: bytes) -> None:
    from .failures import CheckFailed

    if _receive_or_gone() != frame:
        raise CheckFailed("Процесс с вашим кодом нарушил порядок обмена с проверкой.")


def _reset_peak(pid: int) -> int | None:
    """The child's peak resident memory set to what it holds now (``clear_refs`` 5); that amount, in bytes."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        return None
    return _memory_field(pid, "VmRSS")


#: Where the code a call may load lives — the interpreter's and the packages' folders, the system's libraries: read-only
#: in the sandbox, so no page of a file there holds anything the student's code wrote.
LIBRARY_FOLDERS = tuple(dict.fromkeys(os.path.join(os.path.realpath(p), "")
                                      for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, "/usr", "/lib", "/lib64")))


def _library_pages(pid: int) -> int | None:
    """Bytes of the child's resident memory that are pages of library files as they are on disk (what importing
    ``numpy.fft`` maps, 5 MiB: not memory the student's code allocated), from ``/proc/<pid>/smaps``.  A file the
    student's code wrote and mapped is not in :data:`LIBRARY_FOLDERS`: its pages stay counted."""
    total, library = 0, False
    try:
        with open(f"/proc/{pid}/smaps") as handle:
            for line in handle:
                if line[:1] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:  # a mapping's header line
                    fields = line.split(None, 5)
                    library = len(fields) == 6 and fields[5].strip().startswith(LIBRARY_FOLDERS)
                elif library and line.startswith(("Rss:", "Anonymous:")):
                    size = int(line.split()[1]) * 1024
                    total += size if line[0] == "R" else -size
    except (OSError, ValueError, IndexError):
        return None
    return total


def _memory_field(pid: int, name: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _receive_or_gone() -> bytes:
    from .failures import CheckFailed

    try:
        data = _receive(_JUDGE["socket"])
    except OSError:
        data = None
    if data is None:
        failure = CheckFailed(_gone_message())
        failure.show_output = True  # the worker's reply asks the grader to quote the output's end
        raise failure
    return data


def _gone_message() -> str:
    from .failures import SIGNAL_MEANINGS, signal_name

    status = None
    pid = _JUDGE["pid"]
    if pid is not None:
        with contextlib.suppress(ChildProcessError):
            _, status = os.waitpid(pid, 0)
            _JUDGE.update(pid=None)
    how = ""
    if status is not None:
        code = os.waitstatus_to_exitcode(status)
        if code < 0:
            name = signal_name(-code)
            what = f": {SIGNAL_MEANINGS[name]}" if name in SIGNAL_MEANINGS else ""
            how = f" (сигнал {name}{what})"
        else:
            how = f" с кодом {code}"
    return (f"Процесс с вашим кодом завершился{how}, не вернув результата. Функция не должна вызывать "
            "os._exit / sys.exit или завершать процесс.")


def _answer(data: bytes, args: tuple = (), kwargs: dict | None = None):
    from .failures import CheckFailed

    try:
        answer = _FromStudent(io.BytesIO(data)).load()
    except Exception as error:  # noqa: BLE001 - whatever the child sent that is not data
        raise CheckFailed(f"Процесс с вашим кодом прислал не данные: {type(error).__name__}: "
                          f"{str(error)[:200]}") from None
    kind = answer[0] if type(answer) is tuple and answer else None
    if kind == "ok" and len(answer) == 3:
        _copy_back(answer[2], args, kwargs or {})
        return answer[1]
    if kind == "failed" and len(answer) == 5 and type(answer[1]) is str:
        failure = CheckFailed(answer[1])
        failure.mistake = answer[2] if type(answer[2]) is str else None
        failure.not_started = answer[3] is True
        failure.not_gradable = answer[4] is True
        raise failure
    if kind == "raised" and len(answer) == 5 and all(type(part) is str for part in answer[1:4]):
        raise _rebuilt(*answer[1:])
    raise CheckFailed("Процесс с вашим кодом прислал ответ не того вида.")


def _copy_back(copies, args: tuple, kwargs: dict) -> None:
    """The array arguments as the student's call left them, written into the judge's arrays (a check that the
    inputs are unchanged reads them).  An answer of another shape or kind is left alone."""
    if type(copies) is not tuple or len(copies) != 2 or type(copies[0]) is not list or type(copies[1]) is not dict:
        return
    mine = [a for a in _arrays(args, kwargs)]
    theirs = copies[0] + [copies[1][key] for key in sorted(copies[1]) if type(key) is str]
    for ours, back in zip(mine, theirs):
        if type(back) is np.ndarray and back.shape == ours.shape and back.dtype == ours.dtype \
                and ours.flags.writeable:
            np.copyto(ours, back)


def _arrays(args: tuple, kwargs: dict) -> list:
    return [a for a in args if type(a) is np.ndarray] + \
        [kwargs[key] for key in sorted(kwargs) if type(kwargs[key]) is np.ndarray]


_BUILTIN_ERRORS = {name: value for name, value in vars(builtins).items()
                   if isinstance(value, type) and issubclass(value, BaseException)}


def _rebuilt(name: str, text: str, where: str, builtin) -> BaseException:
    """A student's exception as the judge raises it: the builtin class when it was one, a class of that name
    otherwise; ``student_where`` holds the student's frames (call_student shows them)."""
    cls = _BUILTIN_ERRORS.get(name) if builtin is True else None
    if cls is None or cls in (SystemExit, KeyboardInterrupt, GeneratorExit):
        cls = type(name if name.isidentifier() else "Exception", (Exception,), {})
    try:
        error = cls(text)
    except Exception:  # noqa: BLE001 - a builtin that wants other arguments
        error = type(name, (Exception,), {})(text)
    error.student_where = where
    error.student_text = text
    return error


# --- the child -------------------------------------------------------------------------------------

def _child(sock: socket.socket, payloads: list[bytes], judge: int, prepare=None, set_up=None) -> None:
    from ..isolation import guard
    from .failures import CheckFailed, shorten

    _prctl(4, 1)  # PR_SET_DUMPABLE: the judge (its parent) reads this one's memory use
    _prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: it dies with the judge
    if os.getppid() != judge:
        os._exit(1)
    unprepared, facts = None, None
    try:  # the grader's own, before any student code exists here: what it says the judge may believe
        facts = prepare() if prepare is not None else None
        if set_up is not None:
            set_up()
    except BaseException as error:  # noqa: BLE001
        unprepared = f"{type(error).__name__}: {shorten(str(error), 300)}"
    _send(sock, _dumps(_Back, ("prepared", unprepared, facts if _plain(facts) else None)))
    if unprepared is not None or _receive(sock) != _GO:
        os._exit(0)
    try:
        try:
            with guard.student_code():
                loaded = [pickle.loads(blob) for blob in payloads]
        except guard.Tampering as error:
            raise CheckFailed(f"Нарушение правил проверки при передаче объекта: {error}.") from None
        except Exception as error:
            name, text = guard.describe(error)
            raise CheckFailed(f"Не удалось восстановить ваш объект для проверки: "
                              f"{name}: {shorten(text, 300)}") from None
        _send(sock, _reply_bytes(("ok", loaded, ([], {}))))
    except CheckFailed as failure:
        _send(sock, _reply_bytes(_failed(failure)))
    while True:
        data = _receive(sock)
        if data is None:
            os._exit(0)
        target, args, kwargs, errstate, measure = _FromJudge(io.BytesIO(data)).load()
        if measure:  # the judge resets the peak between these frames and reads it after the call
            _warm_up()
            _send(sock, _READY)
            if _receive(sock) != _GO:
                os._exit(0)
        try:
            with np.errstate(**errstate):
                value = target(*args, **kwargs)
            answer = ("ok", value, ([a for a in args if type(a) is np.ndarray],
                                    {k: v for k, v in kwargs.items() if type(v) is np.ndarray}))
        except CheckFailed as failure:
            answer = _failed(failure)
        except _Raised as raised:
            answer = ("raised", *raised.args)
        except MemoryError:
            answer = ("failed", "Проверка исчерпала лимит памяти (MemoryError).", None, False)
        except BaseException as error:  # noqa: BLE001 - the grader's code in this process failed
            answer = ("failed", f"Внутренняя ошибка проверки в процессе с вашим кодом: {type(error).__name__}: "
                      f"{shorten(str(error), 300)}", None, False)
        if measure:
            _send(sock, _DONE)
            if _receive(sock) != _GO:
                os._exit(0)
        _send(sock, _reply_bytes(answer))


_WARM = {"done": False}


def _warm_up() -> None:
    """Child, before the first measured call: what NumPy and BLAS allocate once per process (GEMM buffers), so
    that it does not count as the student's memory."""
    if not _WARM["done"]:
        for dtype in (np.float32, np.float64):
            square = np.ones((256, 256), dtype)
            _ = square @ square
        _WARM["done"] = True


def _failed(failure) -> tuple:
    mistake = getattr(failure, "mistake", None)
    return ("failed", str(failure), mistake if type(mistake) is str else None,
            getattr(failure, "not_started", False) is True, getattr(failure, "not_gradable", False) is True)


def _reply_bytes(answer: tuple) -> bytes:
    try:
        return _dumps(_Back, answer)
    except Exception as error:  # noqa: BLE001
        return _dumps(_Back, ("failed", f"Результат не удалось передать проверке: {type(error).__name__}: "
                                        f"{str(error)[:200]}", None, False))


class _Raised(Exception):
    """Child: a student's exception from :func:`_plain_call`, as data (name, text, frames, builtin or not)."""


def _plain_call(function, *args, **kwargs):
    """Child: the student's object called as the grader's own code would call it (inside a grader helper that
    catches its exceptions); an exception comes back to be raised again in the judge."""
    import traceback

    from ..isolation import guard
    from .failures import _PACKAGE_DIR, CheckFailed

    try:
        with guard.student_code():
            return function(*args, **kwargs)
    except guard.Tampering as error:
        raise CheckFailed(f"Нарушение правил проверки: {error}.") from None
    except BaseException as error:  # noqa: BLE001 - the student's, carried to the judge
        frames = [frame for frame in traceback.extract_tb(error.__traceback__)[1:]
                  if not frame.filename.startswith(_PACKAGE_DIR)]
        try:
            name, text = guard.describe(error)
        except guard.Tampering as tampering:
            raise CheckFailed(f"Нарушение правил проверки: {tampering}.") from None
        builtin = type(error) is _BUILTIN_ERRORS.get(type(error).__name__)
        raise _Raised(name, text, "".join(traceback.format_list(frames[-3:])), builtin) from None


def _prctl(option: int, value: int) -> None:
    try:
        import ctypes

        ctypes.CDLL(None).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass
