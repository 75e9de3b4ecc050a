"""Run one check in a fresh worker process, so that student code cannot hurt the grader.

The student's objects travel by value (cloudpickle) to ``python -I -m autograder.worker``,
which imports the check before it unpickles anything, caps its address space and runs the
check.  A hang is killed after the check's timeout, a memory bomb hits the cap and raises
MemoryError, and ``os._exit`` or a segfault ends only the worker: every case becomes a failed
check with a Russian message, never a dead kernel or a stalled autograde.

A CPU check's worker is forked by a fork server (``python -I -m autograder.worker --serve``,
started like a worker on the first check): it has imported numpy and the grader once, never runs
student code, and makes each child exactly the process a new worker would be (own session and
process group, only the request pipe and the two output files open, a fresh scratch folder), so a
check costs no interpreter start.  A server that dies is started again, a check it dropped is run
again as a new worker; GPU checks, and every check when ``AUTOGRADER_FORK_SERVER=0``, start a new
worker as before (tests/test_fork_server.py compares the two).

The worker's output goes to files, not pipes (a student printing gigabytes cannot fill the
grader's memory), and only a reply line that starts with this run's nonce is believed.  When no
verdict arrives, the message quotes the end of what the process printed (the student's output
included): a crash usually says why there.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import pickle
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import cloudpickle

from .core import CheckResult, get_check, shorten
from .worker import STARTED

#: Environment of the worker: one BLAS thread (deterministic, small address space).
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg", "PYTHONIOENCODING": "utf-8"}


def _reap_children() -> None:
    """A grader started with SIGCHLD ignored (inherited from whatever launched it) cannot read a
    worker's exit status: the kernel reaps the worker itself and ``subprocess`` reports 0 for it,
    whatever happened.  Put the default back (only the main thread may); the status is then true."""
    if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)


_reap_children()

#: Digests of payloads that already hung in this process: later checks fail at once, so one
#: endless loop costs its own cells a single timeout, not one per check.
_HUNG: dict[str, float] = {}


class PayloadError(Exception):
    """The student's objects could not be serialised for the worker."""


def student_modules(folder: str | None = None) -> list:
    """Modules imported from the notebook's folder (a student's helper ``rmshelper.py``).

    The check worker never sees that folder, so such modules travel by value with the objects
    that use them, exactly like functions defined in the notebook.
    """
    folder = os.path.abspath(folder or os.getcwd())
    found = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        top = name.split(".")[0]
        if not isinstance(path, str) or top == "autograder":
            continue
        parts = os.path.relpath(os.path.abspath(path), folder).split(os.sep)
        # a module file right in the folder, or a package whose folder is right in it
        if parts[0] != os.pardir and (len(parts) == 1 or parts[0] == top):
            found.append(module)
    return found


def pack_one(obj) -> bytes:
    """Serialise one student object by value (functions from the notebook and from the
    student's own modules beside it included)."""
    for module in student_modules():
        with contextlib.suppress(Exception):
            cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as error:  # unpicklable closures, generators, open files...
        raise PayloadError(f"не удалось передать объект на проверку: {type(error).__name__}: "
                           f"{shorten(str(error), 300)}") from None


def pack(objects: list) -> list[bytes]:
    return [pack_one(obj) for obj in objects]


def run_check(check_id: str, payloads: list[bytes], cases: list | None = None,
              *, timeout_s: float | None = None, secret_dirs: tuple[str, ...] = (),
              write_protected: tuple[str, ...] = (), fork: bool | None = None,
              launcher: tuple[str, ...] = ()) -> CheckResult:
    """Run ``check_id`` on the packed objects (one blob each) in a worker; return its result.

    ``secret_dirs`` (never readable by student code) and ``write_protected`` (never writable)
    add to the guard's defaults: this repository's solutions/, the package, the environment.
    ``fork``: start the worker from the fork server (None: for CPU checks, unless
    ``AUTOGRADER_FORK_SERVER=0``) or as a new Python process (False).
    ``launcher``: a program that starts the worker's command line (compute-sanitizer and its
    options): the worker is then a new process, and its parent is the launcher.

    A worker that ends before the student's code ran is the grader's fault: the check runs once
    more in a new process, and if that fails too the result says so (``grader_fault``).
    """
    result = _run_check_once(check_id, payloads, cases, timeout_s=timeout_s, secret_dirs=secret_dirs,
                             write_protected=write_protected, fork=fork, launcher=launcher)
    if result.grader_fault:
        result = _run_check_once(check_id, payloads, cases, timeout_s=timeout_s, secret_dirs=secret_dirs,
                                 write_protected=write_protected, fork=False, launcher=launcher)
    return result


def _run_check_once(check_id: str, payloads: list[bytes], cases: list | None, *, timeout_s: float | None,
                    secret_dirs: tuple[str, ...], write_protected: tuple[str, ...],
                    fork: bool | None, launcher: tuple[str, ...] = ()) -> CheckResult:
    check = get_check(check_id)
    timeout = check.timeout_s if timeout_s is None else timeout_s
    nonce = secrets.token_hex(16)

    def failed(message: str) -> CheckResult:
        return CheckResult(check_id, check.title, check.points, False, message)

    digest = hashlib.sha256(b"".join(payloads)).hexdigest()
    if digest in _HUNG:
        return failed(f"Проверка не запускалась: эта же функция уже не завершилась за {_HUNG[digest]:g} с "
                      "на предыдущей проверке (бесконечный цикл?).")
    env = {**os.environ, **WORKER_ENV, "AUTOGRADER_PARENT": str(os.getpid())}
    if launcher:  # the worker's parent is the launcher: it dies with that one (and it with the group)
        del env["AUTOGRADER_PARENT"]
    # What student code leaves in its folder must not make the cleanup raise in the grader.
    with tempfile.TemporaryDirectory(prefix="autograder-", ignore_cleanup_errors=True) as workdir, \
            tempfile.TemporaryDirectory(prefix="autograder-out-", ignore_cleanup_errors=True) as outdir:
        out_path, err_path = os.path.join(outdir, "reply"), os.path.join(outdir, "stderr")
        output_path = os.path.join(outdir, "output")  # what runs in the worker prints, student code included
        request = pickle.dumps({"check_id": check_id, "cases": cases, "payloads": list(payloads),
                                "memory_limit_gib": check.memory_limit_gib, "nonce": nonce,
                                "output_path": output_path, "secret_dirs": tuple(secret_dirs),
                                "write_protected": tuple(write_protected)})
        with open(out_path, "ab") as out, open(err_path, "ab") as err:
            process = _start(check, env, workdir, out, err, fork=False if launcher else fork, launcher=launcher)
        try:
            process.communicate(request, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.wait()
            _HUNG[digest] = timeout
            return failed(f"Проверка прервана: функция не завершилась за {timeout:g} с. "
                          "Вероятно, бесконечный цикл или слишком медленный алгоритм "
                          "(например, цикл по элементам вместо операций над блоками).")
        except BrokenPipeError:  # the worker died before it read the request
            process.wait()
        except ServerGone:  # the fork server died under the check: run it again, as a plain worker
            _kill_group(process)
            return run_check(check_id, payloads, cases, timeout_s=timeout, secret_dirs=secret_dirs,
                             write_protected=write_protected, fork=False, launcher=launcher)
        finally:
            _kill_group(process)  # whatever the student's code left running
            if isinstance(process, _ForkedWorker):
                process.finish()
        return _parse_reply(check, process.returncode, nonce, _tail(out_path),
                            _tail(err_path) + _tail(output_path))


# --- starting a worker: a new Python process, or a fork of the fork server ------------------

class ServerGone(Exception):
    """The fork server stopped answering (it died, or this process lost it)."""


def _start(check, env: dict, workdir: str, out, err, *, fork: bool | None, launcher: tuple[str, ...] = ()):
    """The worker of one check, with the request still to be written to its stdin."""
    if fork is None:
        fork = not check.needs_gpu and os.environ.get("AUTOGRADER_FORK_SERVER", "1") != "0"
    if fork and _SERVER_LOCK.acquire(blocking=False):  # another thread's check: a plain worker
        try:
            for _ in range(2):  # a server that died since the last check is started again, once
                server = _fork_server(env)
                if server is None:
                    break
                try:
                    return server.start(check.id, workdir, out, err, _SERVER_LOCK)
                except ServerGone:
                    server.close()
                except _NoFork:
                    break
        except BaseException:
            _SERVER_LOCK.release()
            raise
        _SERVER_LOCK.release()
    return subprocess.Popen(
        [*launcher, sys.executable, "-I", "-m", "autograder.worker"], stdin=subprocess.PIPE,
        stdout=out, stderr=err, cwd=workdir, env=env,
        start_new_session=True)  # its own process group: a timeout kills the children too


class _NoFork(Exception):
    """The fork server declined this check (it could not import the check, or threads run)."""


_SERVER_LOCK = threading.Lock()
_SERVER: dict = {}  # "server": the _ForkServer of this process, if one was started


def _fork_server(env: dict):
    """This process's fork server for workers with environment ``env`` (started on first use,
    again when the environment changed or the server died); None when none can be started."""
    server = _SERVER.get("server")
    if server is not None and (server.owner != os.getpid() or server.env != env or server.dead()):
        if server.owner == os.getpid():
            server.close()
        server = None
    if server is None:
        try:
            server = _SERVER["server"] = _ForkServer(env)
        except OSError:
            return None
    return server


@atexit.register
def _stop_fork_server() -> None:
    """At exit the server gets end-of-file and ends; waiting for it keeps its time in this
    process's accounting (``RUSAGE_CHILDREN``) and leaves no zombie."""
    server = _SERVER.get("server")
    if server is not None and server.owner == os.getpid():
        with contextlib.suppress(OSError):
            server.control.close()
        try:
            server.process.wait(timeout=2)
        except Exception:  # noqa: BLE001 - a check still running: the server dies with us anyway
            server.close()


class _ForkServer:
    """``python -I -m autograder.worker --serve``, started like a worker (same interpreter, flags and
    environment, own session), that forks one child per check (:func:`autograder.worker.serve`)."""

    def __init__(self, env: dict):
        self.env, self.owner = dict(env), os.getpid()
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-m", "autograder.worker", "--serve", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, cwd="/", env=env, start_new_session=True)

    def dead(self) -> bool:
        return self.process.poll() is not None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.control.close()
        with contextlib.suppress(OSError):
            self.process.kill()
        with contextlib.suppress(Exception):
            self.process.wait(timeout=5)
        if _SERVER.get("server") is self:
            del _SERVER["server"]

    def message(self, timeout: float | None) -> dict:
        self.control.settimeout(timeout)
        try:
            data = self.control.recv(65536)
        except socket.timeout:
            raise
        except OSError as error:
            raise ServerGone(str(error)) from None
        if not data:
            raise ServerGone("the fork server closed the connection")
        return json.loads(data)

    def start(self, check_id: str, workdir: str, out, err, lock) -> "_ForkedWorker":
        stdin, request_pipe = os.pipe()
        try:
            try:
                socket.send_fds(self.control, [json.dumps({"check_id": check_id, "cwd": workdir}).encode()],
                                [stdin, out.fileno(), err.fileno()])
            except OSError as error:
                raise ServerGone(str(error)) from None
            finally:
                os.close(stdin)
            try:
                reply = self.message(timeout=60)
            except socket.timeout:
                raise ServerGone("the fork server did not answer") from None
        except BaseException:
            os.close(request_pipe)
            raise
        if "pid" not in reply:
            os.close(request_pipe)
            raise _NoFork(reply.get("error"))
        return _ForkedWorker(self, reply["pid"], request_pipe, lock)


class _ForkedWorker:
    """A worker forked by the fork server, with what run_check uses of subprocess.Popen."""

    def __init__(self, server: _ForkServer, pid: int, request_pipe: int, lock):
        self.server, self.pid, self.returncode = server, pid, None
        self._pipe, self._lock = request_pipe, lock

    def communicate(self, request: bytes, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pipe, self._pipe, view = self._pipe, None, memoryview(request)
        try:
            while view:  # BrokenPipeError: the worker died before it read the request
                view = view[os.write(pipe, view):]
        finally:
            os.close(pipe)
        self._wait(max(deadline - time.monotonic(), 0.001), timeout)

    def wait(self) -> int:
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None
        try:
            return self._wait(None, None)
        except ServerGone:  # after a kill or a broken pipe: the child died with its server
            self.returncode = -signal.SIGKILL
            return self.returncode

    def _wait(self, remaining: float | None, timeout: float | None) -> int:
        if self.returncode is not None:
            return self.returncode
        try:
            reply = self.server.message(remaining)
        except socket.timeout:
            raise subprocess.TimeoutExpired("autograder.worker", timeout) from None
        except ServerGone:
            self._release()
            self.server.close()
            raise
        self.returncode = int(reply["returncode"])
        self._release()
        return self.returncode

    def finish(self) -> None:
        """After run_check: a worker whose end the server never reported (an exception in the
        grader) leaves the server out of step, so that server is not used again."""
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None
        if self.returncode is None:
            self.server.close()
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def _tail(path: str, limit: int = 64 * 1024) -> bytes:
    """The last ``limit`` bytes of a worker's output file (the reply is written last); b"" if none."""
    if not os.path.exists(path):
        return b""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(max(0, handle.tell() - limit))
        return handle.read()


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


GRADER_FAULT = ("Сбой проверяющей системы, а не вашего решения: {what}. Эта проверка не оценена "
                "(не ноль — просто нет оценки); запустите её ещё раз.")
#: Below this much free space for temporary files a grader fault says how much is left.
LOW_DISK_BYTES = 1024 * 2**20


def grader_fault(check, what: str, err: bytes = b"") -> CheckResult:
    """The result of a check that the grader could not run; ``what`` says what went wrong (Russian)."""
    message = GRADER_FAULT.format(what=what)
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if free < LOW_DISK_BYTES:
        message += f"\nНа диске для временных файлов ({tempfile.gettempdir()}) свободно {free / 2**20:.0f} МиБ."
    tail = err.decode("utf-8", "replace").strip()
    if tail:
        message += "\nПоследние строки вывода:\n" + shorten(tail[-800:], 800)
    if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:
        message += "\nSIGCHLD игнорируется в процессе проверки: код завершения исполнителя неизвестен."
    return CheckResult(check.id, check.title, check.points, False, message, grader_fault=True)


def _parse_reply(check, returncode: int, nonce: str, out: bytes, err: bytes) -> CheckResult:
    marker = nonce.encode("ascii") + b" "
    lines = [line[len(marker):] for line in out.splitlines() if line.startswith(marker)]
    started = STARTED in lines  # the worker got as far as the student's code
    replies = [line for line in lines if line != STARTED]
    if not replies and not started:
        return grader_fault(check, f"процесс проверки завершился с кодом {returncode}, не дойдя до вашего кода",
                            err)
    if returncode == 0 and replies:
        try:
            reply = json.loads(replies[-1].decode("ascii"))
            if reply.get("grader_fault") is True:
                return grader_fault(check, str(reply["message"]))
            return CheckResult(check.id, check.title, check.points, reply["passed"] is True,
                               str(reply["message"]), reply.get("mistake"), reply.get("not_started") is True)
        except (ValueError, KeyError, TypeError):
            return CheckResult(check.id, check.title, check.points, False,
                               "Проверка вернула нечитаемый ответ (внутренняя ошибка проверки): "
                               + shorten(replies[-1].decode("ascii", "replace"), 300))
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else str(-returncode)
        what = {"SIGSEGV": "обращение к недопустимой памяти (segfault)",
                "SIGKILL": "процесс убит (скорее всего, не хватило памяти)",
                "SIGABRT": "аварийное завершение (abort)"}.get(name, "процесс завершён сигналом")
        message = f"Проверка упала: {what}, сигнал {name}. Ядро и остальные проверки не затронуты."
    else:
        message = (f"Проверка не получила результата: процесс проверки завершился с кодом {returncode}. "
                   "Функция не должна вызывать os._exit / sys.exit или завершать процесс.")
    tail = err.decode("utf-8", "replace").strip()
    if tail:
        message += "\nПоследние строки вывода:\n" + shorten(tail[-800:], 800)
    return CheckResult(check.id, check.title, check.points, False, message)
