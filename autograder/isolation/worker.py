"""The worker process: ``python -I -m autograder.isolation.worker`` runs one check and writes one reply line.

Order matters: read the request, keep the real stdout for the reply, send fd 1 and 2 to an
output file of the grader's (the student's prints and warnings must not reach the reply or
nbgrader's stderr), cap memory and file sizes, import the check (so it captures numpy, tracemalloc and
friends before any student code exists), install the guard, and only then unpickle the
student's objects.

The reply line starts with a nonce that only the grader and this process know.  This process is a judge: it
forks the student process (:mod:`autograder.checks.student_process`) before it reads the nonce, and no student
code ever runs here — a GPU check's neither (its device, CuPy or the emulator's stand-in, is the student
process's: :mod:`autograder.gpu.judged`).  The line is encoded with C functions bound before anything else ran.

Every line is built as text and encoded whole, never from one-byte ``bytes`` constants such as
``b" "``: CPython shares one object per byte value across the process, and a native library that
writes into it (NVRTC does, given ``b" " * 1`` as the buffer of an empty log) changes every such
constant at once.  Before the student's code the worker signs the stage it reached (``stage
request``, ``stage check``, ``stage guard``), and a grader error on the way is a signed grader-fault
reply with its cause: a worker never ends silently before the student's code.
"""
from __future__ import annotations

import json
import json.encoder
import os
import pickle
import signal
import sys

#: Bound at import, before any student code: C functions whose code cannot be swapped.
_write = os.write
_quote = json.encoder.encode_basestring_ascii
_exit = os._exit

#: The line (after the nonce) that says the student's code is about to run.
STARTED = "started"
#: The lines before it: how far a worker got (``stage request``, ``stage check``, ``stage guard``).
STAGE = "stage "
#: The last of them, just before ``started``: the CPU seconds this worker and its student process used so far,
#: which an overloaded machine's wait does not count against the check's limit (isolation.run.wait_for_worker).
STARTUP_CPU = "cpu "

#: A check's scratch and output files are capped: a student printing forever fills no disk.
FILE_LIMIT_MIB = 64


def _line(fd: int, nonce: str, text: str) -> None:
    """One signed line; ``text`` is ASCII.  Built as one string, encoded once (see the module's docstring)."""
    _write(fd, ("\n%s %s\n" % (nonce, text)).encode("ascii"))


def _on_the_gpu_stand_in(check, judge) -> bool:
    """Whether this check's GPU code runs on the CuPy stand-in (``autograder.gpu.emulated_cupy``), as the student
    process said before any student code existed there (``runtime.prepare_gpu_check``), or a check that poses the
    stand-in on purpose (``sanitizer.EMULATOR_RUNS``)."""
    facts = judge.prepared()
    if check.needs_gpu:
        return type(facts) is tuple and len(facts) == 3 and facts[2] is True
    sanitizer = sys.modules.get("autograder.gpu.sanitizer")  # registers those runs: loaded if this is one
    return sanitizer is not None and check.id in sanitizer.EMULATOR_RUNS.values()


def _reply(fd: int, nonce: str, passed: bool, message: str, mistake, not_started=False,
           grader_fault=False, show_output=False) -> None:
    text = ('{"passed": %s, "message": %s, "mistake": %s, "not_started": %s, "grader_fault": %s, '
            '"show_output": %s}') % (
        "true" if passed is True else "false",
        _quote(message if type(message) is str else "?"),
        _quote(mistake) if type(mistake) is str else "null",
        "true" if not_started is True else "false",
        "true" if grader_fault is True else "false",
        "true" if show_output is True else "false")
    _line(fd, nonce, text)


def _die_with_parent() -> None:
    """A check never outlives the grader that started it (a killed autograde leaves no check
    running): Linux delivers SIGKILL here when the parent (the grader, or the fork server that
    the grader started and that dies with it) dies."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != os.environ.get("AUTOGRADER_PARENT", str(os.getppid())):
        _exit(1)  # the parent died before the request was even read


def main() -> None:
    _die_with_parent()
    request = _read_request()
    token = request.pop("stage_token")  # signs the stage lines: they are in the file before student code
    sys.dont_write_bytecode = True
    reply_fd = os.dup(1)
    _line(reply_fd, token, STAGE + "request")
    try:
        check, guard, errors, judge = _prepare(request, reply_fd, token)
    except BaseException as error:  # noqa: BLE001 - the grader's own failure, before any student code
        import traceback

        from ..checks import student_process

        student_process.stop()
        where = "".join(traceback.format_exception(type(error), error, error.__traceback__)[-3:])
        _reply(reply_fd, _read_nonce(), False, f"исполнитель проверки не запустился: {type(error).__name__}: "
               f"{error}\n{where.strip()[-600:]}", None, grader_fault=True)
        _exit(0)
    CheckFailed, GraderFault, shorten = errors
    passed, message, mistake, not_started, fault, show_output = False, "", None, False, False, False
    if os.environ.get("AUTOGRADER_INJECT_WORKER_FAULT") == request["check_id"]:
        _exit(0)  # fault injection (tests/test_class_kills.py): a worker lost before the student's code
    # From here on the student's code may end the process; before it, a missing verdict is the grader's.
    _line(reply_fd, token, STAGE + STARTUP_CPU + "%.3f" % _startup_cpu())
    _line(reply_fd, token, STARTED)
    del token
    judge.go()  # the student process (forked before the nonce is read) may unpickle the student's code now
    nonce = _read_nonce()
    try:
        objects = judge.objects()
        cases = request["cases"]
        if os.environ.get("AUTOGRADER_INJECT_GRADER_FAULT") == request["check_id"]:
            raise GraderFault("проверочный сбой (AUTOGRADER_INJECT_GRADER_FAULT)")  # tests/test_hardening_worker.py
        detail = check.function(*objects, **({"cases": cases} if cases is not None else {}))
        passed, message = True, detail if type(detail) is str else ""
    except GraderFault as error:  # raised by grader code only: call_student turns student errors into CheckFailed
        message, fault = str(error), True
    except CheckFailed as failure:
        message, mistake = str(failure), getattr(failure, "mistake", None)
        not_started = getattr(failure, "not_started", False) is True
        # What this grader cannot run (the GPU stand-in lacks it) is not gradable here: a grader fault, never a 0.
        # Believed only while the stand-in runs the check: a GPU grader never takes it from the student process
        # (which could claim it falsely); on the emulator a false claim leaves its check ungraded, never passed.
        fault = getattr(failure, "not_gradable", False) is True and _on_the_gpu_stand_in(check, judge)
        show_output = getattr(failure, "show_output", False) is True  # the student process ended: its last words
    except MemoryError:
        message = "Проверка исчерпала лимит памяти (MemoryError)."
    except guard.Tampering as error:
        message = f"Нарушение правил проверки: {error}."
    except BaseException as error:  # a bug of the check itself must still say something
        denied = guard.refused_to_grader(error)
        try:
            name, text = guard.describe(error)
        except guard.Tampering as tampering:
            name, text = "Tampering", str(tampering)
        if denied:  # the guard stopped the check's own code: the grader's defect, not the student's
            message, fault = f"защита проверки запретила действие самой проверки: {denied}", True
        else:
            message = f"Внутренняя ошибка проверки: {name}: {shorten(text, 500)}"
    try:
        tampering = judge.verify()
    except CheckFailed as failure:
        tampering = None if not passed else str(failure)
    judge.stop()
    if tampering:
        passed, message, mistake, not_started, fault = False, f"Нарушение правил проверки: {tampering}.", None, False, False
    _reply(reply_fd, nonce, passed, message, mistake, not_started, fault, show_output and not passed)
    _exit(0)  # skip interpreter teardown: student objects may have hostile finalisers


#: The request on standard input: its length (8 bytes, little-endian), the pickled request, then the nonce.
NONCE_BYTES = 32


def _read_request() -> dict:
    import struct

    (length,) = struct.unpack("<Q", _read_exactly(8))
    return pickle.loads(_read_exactly(length))


def _read_nonce() -> str:
    """The verdict's nonce, read after the student process was forked: that process never had it."""
    return _read_exactly(NONCE_BYTES).decode("ascii")


def _read_exactly(count: int) -> bytes:
    """``count`` bytes of descriptor 0, read unbuffered (nothing of what follows is read ahead into memory)."""
    chunks, left = [], count
    while left:
        chunk = os.read(0, min(left, 1 << 20))
        if not chunk:
            _exit(1)  # the grader is gone
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _startup_cpu() -> float:
    """CPU seconds of this worker and of its student process until now: starting Python, importing the check,
    preparing the student process (0.4 to 1.2 s for a new worker on a 2-core laptop; a forked one, next to none)."""
    from .cpu_time import tree_seconds

    return tree_seconds(os.getpid())


def _install_guard(guard, check, request: dict) -> None:
    guard.install(gpu=check.needs_gpu, secret_dirs=request.get("secret_dirs", ()),
                  write_protected=request.get("write_protected", ()))


def _not_dumpable() -> None:
    """Not dumpable: no other process of the sandbox (one the student's code starts, say) may read or trace this
    one's memory — a process that is not dumpable is not ptrace-able without CAP_SYS_PTRACE, which the sandbox
    has not, and its ``/proc/<pid>/mem`` and ``/proc/<pid>/fd`` are closed to the others."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        pass


def _prepare(request: dict, reply_fd: int, token: str):
    """The grader's part before any student code: output files, the check, limits, the guard and
    :mod:`autograder.checks.student_process` to start the student process with (the check's ``before_payload``
    runs there: a GPU check's device never is this process's).

    Descriptor 2 is the grader's output file (the student's prints, warnings, a crash's last words: the grader
    quotes its end when no verdict comes); descriptor 1 becomes it too, the reply keeps ``reply_fd``."""
    os.dup2(2, 1)
    sys.stdout = sys.stderr = open(1, "w", closefd=False)

    from . import guard
    from ..checks import student_process as judge
    from ..checks.core import CheckFailed, GraderFault, get_check, shorten

    check = get_check(request["check_id"])

    def set_up() -> None:  # in this process and, after the check's before_payload, in the student process
        if check.memory_limit_gib is None and "autograder.gpu.nvrtc" in sys.modules:  # a check that may compile CUDA
            sys.modules["autograder.gpu.nvrtc"].warm_up()
        guard.cap_resources(request["memory_limit_gib"], FILE_LIMIT_MIB, request.get("max_processes"))
        _install_guard(guard, check, request)

    # The student process is forked first, from a process that has set up nothing: it prepares itself (CUDA, the
    # stand-in) as a worker did before any limit or guard, then sets up as this process does.
    judge.start(request["payloads"], (0, reply_fd), check.before_payload, set_up)
    _line(reply_fd, token, STAGE + "check")
    set_up()
    _not_dumpable()  # the student process (dumpable: the driver and compute-sanitizer expect it) cannot read this one
    _line(reply_fd, token, STAGE + "guard")
    return check, guard, (CheckFailed, GraderFault, shorten), judge


# --- the fork server -------------------------------------------------------------------------

def serve(control_fd: int) -> None:
    """``python -I -m autograder.isolation.worker --serve FD``: start checks without starting Python.

    A fresh worker spends most of a short check importing numpy and the grader.  This process,
    started by the grader (:mod:`autograder.isolation.run`) exactly like a worker, imports them once
    and then only forks: for each order on the control socket (a check id and a folder, with the
    three descriptors the grader would give a worker: the request pipe, the reply file and the
    output file) the child becomes what ``Popen(..., start_new_session=True, cwd=folder)`` would
    have started — its own session and process group, those descriptors as 0, 1 and 2 and no
    other, that folder — and runs :func:`main`, which does everything a worker does (death with
    its parent, limits, guard, nonce-signed reply).  This process never reads a request, never
    unpickles anything and never runs student code; it answers the child's pid once the child is
    in its own session, and its exit status once it is reaped.
    """
    _die_with_parent()
    from . import guard  # noqa: F401 - imported once, here: numpy, the guard's snapshot
    from ..checks import student_process  # noqa: F401 - and socket: a child judges with it
    from ..checks.core import get_check

    before = set(sys.modules)
    import socket
    serving = tuple(set(sys.modules) - before)  # what only serving needs: gone again in each child
    start = os.getcwd()
    sandboxed = os.environ.get("AUTOGRADER_SANDBOXED") == "1"
    if sandboxed:
        _not_dumpable()  # no check it forks may trace it or read its memory

    control = socket.socket(fileno=control_fd)
    me = str(os.getpid())
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 65536, 3)
        except OSError:
            break
        if not data:
            break  # the grader is gone
        try:
            order = json.loads(data)
            get_check(order["check_id"])  # the lesson's module, imported before any fork
            if len(fds) != 3 or len(os.listdir("/proc/self/task")) != 1:
                raise RuntimeError("no fork: descriptors missing or threads running")
            if cuda_initialised():
                raise RuntimeError("no fork: CUDA was initialised in the fork server")
        except Exception as error:  # noqa: BLE001 - the grader starts a plain worker instead
            for fd in fds:
                os.close(fd)
            control.send(json.dumps({"error": f"{type(error).__name__}: {error}"}).encode())
            continue
        ready, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            _child(order["cwd"], order.get("env", {}), fds, me, serving, start)
        os.close(ready_w)
        for fd in fds:
            os.close(fd)
        os.read(ready, 1)  # returns when the child closed its copy: it is in its own session
        os.close(ready)
        control.send(json.dumps({"pid": pid}).encode())
        _, status = os.waitpid(pid, 0)
        if sandboxed:
            _kill_the_rest()
            _empty_writable_places(start)
        control.send(json.dumps({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)}).encode())


def cuda_initialised() -> bool:
    """Whether this process initialised CUDA: ``cuInit`` opens the driver's device files (``/dev/nvidiactl``,
    ``/dev/nvidia0``, ``/dev/nvidia-uvm``) and maps some of them, and a child forked after that cannot use the
    GPU.  Importing CuPy or NVRTC opens none of them."""
    with open("/proc/self/maps", "rb") as maps:
        if b"/dev/nvidia" in maps.read():
            return True
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("/dev/nvidia"):
                return True
        except OSError:  # closed since the listing
            continue
    return False


def _empty_writable_places(folder: str) -> None:
    """In a sandbox after a check: remove what it left where the next check could read it — this server's folder
    (all but its own home), the sandbox's private ``/tmp`` and ``/dev/shm`` — so no check hands data (a hidden
    check's inputs) to another.  The folders on the way to this server's folder (it may be in that ``/tmp``) are
    emptied around it."""
    import shutil

    keep = {os.path.realpath(os.environ.get("HOME", "")), os.path.realpath(folder)}

    def empty(place: str) -> None:
        try:
            names = os.listdir(place)
        except OSError:
            return
        for name in names:
            path = os.path.realpath(os.path.join(place, name))
            if path in keep or any(kept.startswith(path + os.sep) for kept in keep):
                if path != os.path.realpath(os.environ.get("HOME", "")):
                    empty(path)  # on the way to (or is) the server's folder: empty around what stays
                continue
            try:
                if os.path.isdir(path) and not os.path.islink(os.path.join(place, name)):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(os.path.join(place, name))
            except OSError:
                pass

    for place in ("/tmp", "/dev/shm", folder):
        empty(place)


def _kill_the_rest() -> None:
    """In a sandbox (its own PID namespace) after a check: kill every process but bubblewrap's init and
    this server — whatever the check's code left running, daemons that left its session included."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (1, me):
            try:
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass


def _child(cwd: str, env: dict, fds: list[int], server: str, serving: tuple, start: str) -> None:
    """In the forked child: become a fresh worker's process, then run :func:`main`.

    ``env`` is what differs from the server's environment for this check: its own empty home and caches.
    """
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the control socket and the ready pipe too
        os.chdir(cwd)
        os.environ.update(env)
        os.environ["AUTOGRADER_PARENT"] = server
        del sys.argv[1:]
        for name in serving:
            sys.modules.pop(name, None)
        if sys.path[:1] == [start]:  # Python < 3.11: -m put the server's folder first, a worker's own
            sys.path[0] = os.getcwd()
        if "numpy.random" in sys.modules:  # a fresh process draws its own global seed
            sys.modules["numpy.random"].seed()
        main()
    finally:
        _exit(70)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]))
    else:
        main()
