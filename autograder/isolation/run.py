"""Run one check in a fresh worker process, so that student code cannot hurt the grader.

The student's objects travel by value (cloudpickle) to ``python -I -m autograder.isolation.worker``,
which imports the check before it unpickles anything, caps its address space and runs the
check.  A hang is killed after the check's timeout, a memory bomb hits the cap and raises
MemoryError, and ``os._exit`` or a segfault ends only the worker: every case becomes a failed
check with a Russian message, never a dead kernel or a stalled autograde.

A CPU check's worker is forked by a fork server (``python -I -m autograder.isolation.worker --serve``,
started like a worker on the first check): it has imported numpy and the grader once, never runs
student code, and makes each child exactly the process a new worker would be (own session and
process group, only the request pipe and the two output files open, a fresh scratch folder), so a
check costs no interpreter start.  A server that dies is started again, a check it dropped is run
again as a new worker.  GPU checks are forked too, by a server of their own in a sandbox with the GPU's
device nodes, which imports CuPy but never initialises CUDA (a child forked after that could not use
the GPU); each child initialises CUDA itself, as a new worker would (on the H200 a new worker spent
1.25 s before its first kernel, of which CUDA's initialisation, the context and the warm-ups are about
0.3 s: benchmarks/results/gpu_grading_time.txt).  Where the machine has no NVIDIA device a GPU check runs
on the PTX emulator, a CPU program, in the CPU checks' server.  Checks under compute-sanitizer, and
every check when ``AUTOGRADER_FORK_SERVER=0``, start a new worker (tests/test_fork_server.py compares
the two).

The worker's output goes to files, not pipes (a student printing gigabytes cannot fill the
grader's memory), and only a reply line that starts with this run's nonce is believed.  When no
verdict arrives, the message quotes the end of what the process printed (the student's output
included): a crash usually says why there.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pickle
import struct
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import cloudpickle

from . import cpu_time, fork_server
from . import sandbox as sandbox_module
from ..checks.core import CheckResult, get_check, shorten
from ..checks.failures import signal_meaning, signal_name
from .guard.state import loaded_modules
from .home import private_home, worker_environment
from .worker import STAGE, STARTED, STARTUP_CPU

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


def payload_digest(payloads: list[bytes]) -> str:
    """The name of a check's objects in the memo of functions that did not finish (:data:`_HUNG`)."""
    return hashlib.sha256(b"".join(payloads)).hexdigest()


def not_run_after_hang(check_id: str, timeout: float) -> CheckResult:
    """The verdict of a check not run because the same objects did not finish within ``timeout`` s before."""
    check = get_check(check_id)
    return CheckResult(check_id, check.title, check.points, False,
                       f"Проверка не запускалась: эта же функция уже не завершилась за {timeout:g} с "
                       "на предыдущей проверке (бесконечный цикл?).")


def hang_rule(checks: list[tuple[str, str | None, float, CheckResult]]) -> list[CheckResult]:
    """The results of checks that ran side by side, as one after another would have them: ``checks`` are
    (check id, digest of its objects or None, its time limit, its result) in the notebook's order.  One after
    another, a check after one whose same objects did not finish is not run (:data:`_HUNG`); side by side it may
    have run meanwhile, so its result becomes that one's."""
    hung: dict[str, float] = {}
    results = []
    for check_id, digest, timeout, result in checks:
        if digest is not None and digest in hung:
            result = not_run_after_hang(check_id, hung[digest])
        elif digest is not None and result.timed_out:
            hung[digest] = timeout
        results.append(result)
    return results


#: The sandbox checks start in (:func:`sandboxed`); None: as plain processes.
_SCOPE: dict = {"sandbox": None}


@contextlib.contextmanager
def sandboxed(box: "sandbox_module.Sandbox | None"):
    """Checks started in this block run in ``box``, one submission's sandbox (None: no sandbox).

    The fork servers started for ``box`` live in it and go with it at the end.
    """
    previous, _SCOPE["sandbox"] = _SCOPE["sandbox"], box
    try:
        yield
    finally:
        _SCOPE["sandbox"] = previous
        if box is not None:
            fork_server.close_servers_of(box)


class PayloadError(Exception):
    """The student's objects could not be serialised for the worker."""


def student_modules(folder: str | None = None) -> list:
    """Modules imported from the notebook's folder (a student's helper ``rmshelper.py``).

    The check worker never sees that folder, so such modules travel by value with the objects
    that use them, exactly like functions defined in the notebook.
    """
    folder = os.path.abspath(folder or os.getcwd())
    found = []
    for name, module in loaded_modules():
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
    ``fork``: start the worker from a fork server (None: unless ``AUTOGRADER_FORK_SERVER=0``) or as a
    new Python process (False).
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

    digest = payload_digest(payloads)
    if digest in _HUNG:
        return not_run_after_hang(check_id, _HUNG[digest])
    box = _SCOPE["sandbox"]
    env = {**worker_environment(), "AUTOGRADER_PARENT": str(os.getpid())}
    if launcher or box is not None:  # the worker's parent is the launcher, or bubblewrap's init in the sandbox:
        del env["AUTOGRADER_PARENT"]  # it dies with that one (and it with the group, or the sandbox)
    if box is not None:
        box = box.with_gpu(check.needs_gpu and not on_emulator_here(check))
        env["AUTOGRADER_SANDBOXED"] = "1"
    # The reply and the output are the grader's files, in no folder a sandbox sees (TMPDIR is hidden there); the
    # worker gets them as its descriptors 1 and 2.  The stage lines before the student's code are signed with a
    # token of their own: reading them back tells the student's code nothing that signs a verdict.
    stage_token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="autograder-out-", ignore_cleanup_errors=True) as outdir:
        out_path, output_path = os.path.join(outdir, "reply"), os.path.join(outdir, "output")
        request = frame_request({"check_id": check_id, "cases": cases, "payloads": list(payloads),
                                 "memory_limit_gib": check.memory_limit_gib,
                                 "stage_token": stage_token, "secret_dirs": tuple(secret_dirs),
                                 "write_protected": tuple(write_protected),
                                 "max_processes": sandbox_module.process_limit() if box is not None else None},
                                nonce)
        with open(out_path, "ab") as out, open(output_path, "ab") as output, \
                _worker(check, env, box, out, output, fork=False if launcher else fork, launcher=launcher) as process:
            try:
                wait_for_worker(process, request, timeout, lambda: startup_cpu(_head(out_path), stage_token))
            except subprocess.TimeoutExpired:
                _kill_group(process)
                process.wait()
                _HUNG[digest] = timeout
                return CheckResult(check_id, check.title, check.points, False,
                                   f"Проверка прервана: функция не завершилась за {timeout:g} с. "
                                   "Вероятно, бесконечный цикл или слишком медленный алгоритм "
                                   "(например, цикл по элементам вместо операций над блоками).", timed_out=True)
            except BrokenPipeError:  # the worker died before it read the request
                process.wait()
            except fork_server.ServerGone:  # the fork server died under the check: run it again, as a plain worker
                _kill_group(process)
                return run_check(check_id, payloads, cases, timeout_s=timeout, secret_dirs=secret_dirs,
                                 write_protected=write_protected, fork=False, launcher=launcher)
        return _parse_reply(check, process.returncode, nonce, stage_token, _tail(out_path), _tail(output_path))


def frame_request(request: dict, nonce: str) -> bytes:
    """What a worker reads on its standard input: the request's length and pickle, then the verdict's nonce
    (the worker reads the nonce only once no student code can run where it is: autograder/isolation/worker.py)."""
    body = pickle.dumps(request)
    return struct.pack("<Q", len(body)) + body + nonce.encode("ascii")


@contextlib.contextmanager
def _worker(check, env: dict, box, out, output, *, fork: bool | None, launcher: tuple[str, ...]):
    """The started worker of one check (the request still to be written), in a folder of its own that nothing
    else sees: a fresh folder bound into its own sandbox, or its fork server's folder, which the server empties
    after each check.  At the end whatever the student's code left running is killed and the folder removed."""
    if fork is None:
        fork = os.environ.get("AUTOGRADER_FORK_SERVER", "1") != "0"
    process = None
    if fork:
        server = fork_server.reserve(env, box)
        if server is not None:
            with _check_folders(server.folder) as (workdir, home):
                process = fork_server.start_on(server, check.id, workdir, home, out, output)
                if process is not None:
                    try:
                        yield process
                    finally:
                        _kill_group(process)
                        process.finish()
                    return
    parent = box.scratch if box is not None else None  # a plain worker in a sandbox: a folder of its own there
    with tempfile.TemporaryDirectory(prefix="autograder-check-", dir=parent, ignore_cleanup_errors=True) as own, \
            _check_folders(own) as (workdir, home):
        if box is not None:
            box = dataclasses.replace(box, scratch=own)
        argv, env = [*launcher, sys.executable, "-I", "-m", "autograder.isolation.worker"], {**env, **home}
        if box is not None:
            argv = sandbox_module.command(box, argv, env=env, cwd=workdir)
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=output, cwd=workdir, env=env,
                                   start_new_session=True)  # its own process group: a timeout kills the children
        try:
            yield process
        finally:
            _kill_group(process)  # whatever the student's code left running


@contextlib.contextmanager
def _check_folders(parent: str | None):
    """A check's working folder and its own home, in ``parent``; removed at the end (what student code leaves in
    them must not make the cleanup raise in the grader)."""
    with tempfile.TemporaryDirectory(prefix="autograder-", dir=parent, ignore_cleanup_errors=True) as workdir, \
            tempfile.TemporaryDirectory(prefix="autograder-home-", dir=parent, ignore_cleanup_errors=True) as home_dir:
        yield workdir, private_home(home_dir)


#: How long a check may run on an overloaded machine, in multiples of its time limit (see cpu_time).
OVERLOADED_WALL_LIMITS = 4


def wait_for_worker(process, request: bytes, timeout: float, startup=lambda: 0.0) -> None:
    """Write the request and wait for the worker to end, within the check's time limit; raise TimeoutExpired
    when it did not.  Where the limit passes on an overloaded machine, wait on while the worker (its processes,
    or the fork server's, whose only busy child it is) has had less CPU time than the limit, its own start-up
    (``startup()``: the seconds the worker signed before the student's code) not counted, up to
    OVERLOADED_WALL_LIMITS limits in all: a correct check that waited for a core is not an endless loop."""
    root = process.server.process.pid if isinstance(process, fork_server.ForkedWorker) else process.pid
    before = cpu_time.tree_seconds(root)
    end = time.monotonic() + OVERLOADED_WALL_LIMITS * timeout
    try:
        process.communicate(request, timeout=timeout)
        return
    except subprocess.TimeoutExpired:
        pass
    while (left := end - time.monotonic()) > 0 and cpu_time.overloaded() \
            and cpu_time.tree_seconds(root) - before < timeout + startup():
        try:
            process.communicate(None, timeout=min(1.0, left))
            return
        except subprocess.TimeoutExpired:
            pass
    raise subprocess.TimeoutExpired("autograder.isolation.worker", timeout)


# --- starting a worker: a new Python process, or a fork of the fork server ------------------

def on_emulator_here(check) -> bool:
    """A GPU check on a machine without an NVIDIA device node: it can only run on the PTX emulator (or say
    «нужен GPU»), so it needs no GPU in its sandbox and is forked by the CPU checks' server."""
    return check.needs_gpu and not sandbox_module.gpu_devices()


def startup_cpu(head: bytes, stage_token: str) -> float:
    """The CPU seconds a worker signed before the student's code (worker.STARTUP_CPU); 0.0 before that line.  Only
    the first such line counts: the worker writes it before any student code exists."""
    marker = STAGE + STARTUP_CPU
    for line in signed_lines(head, stage_token):
        if line.startswith(marker):
            try:
                return max(0.0, float(line[len(marker):]))
            except ValueError:
                return 0.0
    return 0.0


def _head(path: str, limit: int = 4096) -> bytes:
    """The first ``limit`` bytes of a worker's reply file (its stage lines); b"" if none."""
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""


def _tail(path: str, limit: int = 64 * 1024) -> bytes:
    """The last ``limit`` bytes of a worker's output file (the reply is written last); b"" if none."""
    if not os.path.exists(path):
        return b""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(max(0, handle.tell() - limit))
        return handle.read()


def _kill_group(process) -> None:
    if isinstance(process, fork_server.ForkedWorker):
        process.kill()
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


GRADER_FAULT = ("Сбой проверяющей системы, а не вашего решения: {what}. Эта проверка не оценена "
                "(не ноль — просто нет оценки). Что делать: перезапустите ядро ноутбука («Ядро» → «Перезапустить "
                "ядро») и выполните ячейки заново; если сбой повторится, пришлите это сообщение целиком "
                "преподавателю. При автопроверке курса такая работа остаётся непроверенной, пока её не перепроверят.")
#: Below this much free space for temporary files a grader fault says how much is left.
LOW_DISK_BYTES = 1024 * 2**20
#: Where a worker lost before the student's code stopped, by the last stage it signed (worker.STAGE).
LOST_AT = {None: "до чтения задания", "request": "при загрузке проверки",
           "check": "при установке ограничений и защиты", "guard": "перед запуском вашего кода"}


def damaged_byte_objects() -> list[int]:
    """Byte values whose shared one-byte ``bytes`` object in this process no longer holds that byte.

    CPython keeps one object per byte value (``b" "``, ``bytes([32])``, one-byte slices); a native library
    that writes into it (NVRTC into ``b" " * 1``, the buffer of an empty log) changes it for the whole
    process.  The grader does not rely on these objects; the message names them, since the rest of the
    process (the student's own code) may."""
    return [value for value in range(256) if bytes([value])[0] != value]


def grader_fault(check, what: str, err: bytes = b"") -> CheckResult:
    """The result of a check that the grader could not run; ``what`` says what went wrong (Russian)."""
    message = GRADER_FAULT.format(what=what)
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if free < LOW_DISK_BYTES:
        message += f"\nНа диске для временных файлов ({tempfile.gettempdir()}) свободно {free / 2**20:.0f} МиБ."
    damaged = damaged_byte_objects()
    if damaged:
        message += ("\nВ этом процессе испорчены общие однобайтовые объекты bytes (значения "
                    + ", ".join(f"0x{v:02x}" for v in damaged[:8]) + "): их перезаписала нативная библиотека; "
                    "перезапуск ядра их восстанавливает.")
    tail = err.decode("utf-8", "replace").strip()
    if tail:
        message += "\nПоследние строки вывода:\n" + shorten(tail[-800:], 800)
    if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:
        message += "\nSIGCHLD игнорируется в процессе проверки: код завершения исполнителя неизвестен."
    return CheckResult(check.id, check.title, check.points, False, message, grader_fault=True)


def signed_lines(out: bytes, nonce: str) -> list[str]:
    """The lines of a worker's reply file signed with ``nonce``, without the signature.

    Decoded as text first: the signature is matched as a string, never built from one-byte ``bytes``
    objects, which a native library in this process may have overwritten (:func:`damaged_byte_objects`)."""
    marker = nonce + " "
    return [line[len(marker):] for line in out.decode("ascii", "replace").splitlines() if line.startswith(marker)]


def _parse_reply(check, returncode: int, nonce: str, stage_token: str, out: bytes, err: bytes) -> CheckResult:
    lines = signed_lines(out, stage_token)
    started = STARTED in lines  # the worker got as far as the student's code
    stages = [line[len(STAGE):] for line in lines
              if line.startswith(STAGE) and not line.startswith(STAGE + STARTUP_CPU)]
    replies = signed_lines(out, nonce)
    if not replies and not started:
        where = LOST_AT.get(stages[-1] if stages else None, "перед запуском вашего кода")
        return grader_fault(check, f"процесс проверки завершился с кодом {returncode} {where}, не дойдя до "
                                   "вашего кода", err)
    if returncode == 0 and replies:
        try:
            reply = json.loads(replies[-1])
            if reply.get("grader_fault") is True:
                return grader_fault(check, str(reply["message"]))
            message = str(reply["message"])
            tail = err.decode("utf-8", "replace").strip()
            if reply.get("show_output") is True and tail:  # the student process ended without a result
                message += "\nПоследние строки вывода:\n" + shorten(tail[-800:], 800)
            return CheckResult(check.id, check.title, check.points, reply["passed"] is True,
                               message, reply.get("mistake"), reply.get("not_started") is True)
        except (ValueError, KeyError, TypeError):
            return CheckResult(check.id, check.title, check.points, False,
                               "Проверка вернула нечитаемый ответ (внутренняя ошибка проверки): "
                               + shorten(replies[-1], 300))
    if returncode - 128 in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT):
        returncode = 128 - returncode  # bubblewrap (and a shell) exit so when their child was killed by the signal
    if returncode < 0:
        name = signal_name(-returncode)
        message = f"Проверка упала: {signal_meaning(name)}, сигнал {name}. Ядро и остальные проверки не затронуты."
    else:
        message = (f"Проверка не получила результата: процесс проверки завершился с кодом {returncode}. "
                   "Функция не должна вызывать os._exit / sys.exit или завершать процесс.")
    tail = err.decode("utf-8", "replace").strip()
    if tail:
        message += "\nПоследние строки вывода:\n" + shorten(tail[-800:], 800)
    return CheckResult(check.id, check.title, check.points, False, message)
